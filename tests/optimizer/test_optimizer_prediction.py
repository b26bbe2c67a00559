"""Predictions: quantiles kept consistent whatever a model hands in, and the status form a person reads."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgwe.optimizer.prediction import MAX_REASON_CHARS, Prediction

levels = st.floats(min_value=-0.5, max_value=1.5) | st.just(math.nan)
values = st.floats(allow_nan=True, allow_infinity=True)


@given(st.lists(st.tuples(levels, values), max_size=12), values)
def test_quantiles_are_finite_in_range_and_never_decrease(pairs, value):
    p = Prediction.make("duration_seconds", value, pairs)
    got = sorted(p.quantiles.items())
    assert all(0 < q < 1 and math.isfinite(v) for q, v in got)
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(got))
    assert math.isfinite(p.value)


@given(st.lists(st.tuples(st.floats(0.01, 0.99), st.floats(-1e6, 1e6)), min_size=1, max_size=8))
def test_a_floor_holds_for_every_value(pairs):
    p = Prediction.make("duration_seconds", -5.0, pairs, floor=0.0)
    assert p.value >= 0 and all(v >= 0 for v in p.quantiles.values())


def test_at_interpolates_between_quantiles_and_clamps_outside():
    p = Prediction.make("duration_seconds", 100, {0.5: 100, 0.9: 500})
    assert p.at(0.7) == pytest.approx(300)
    assert p.at(0.1) == 100 and p.at(0.99) == 500
    assert Prediction.make("x", 7).at(0.9) == 7  # no quantiles: the value


def test_status_names_levels_as_percentiles_and_says_the_fallback():
    p = Prediction.make(
        "duration_seconds",
        600,
        {0.1: 60, 0.5: 600, 0.9: 3600, 0.975: 7200},
        reason="from 37 finished runs of runtime torch-distributed in ml-research",
        samples=37,
        model="runtime",
    )
    status = p.to_status()
    assert (status["p10"], status["p50"], status["p90"], status["p97_5"]) == (60, 600, 3600, 7200)
    assert status["reason"].startswith("from 37 finished runs") and "fallback" not in status
    assert p.from_model and p.why == p.reason
    fb = Prediction.make("duration_seconds", 1186, reason="global median", fallback="no run yet: the prior")
    assert not fb.from_model and fb.to_status()["fallback"] == "no run yet: the prior" == fb.why


def test_reasons_are_one_bounded_line():
    p = Prediction.make("x", 1, reason="a\nb " + "c" * 2000)
    assert "\n" not in p.reason and len(p.reason) == MAX_REASON_CHARS and p.reason.endswith("...")
