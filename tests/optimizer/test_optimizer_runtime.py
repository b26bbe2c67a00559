"""The runtime model: a prior without history, shrinkage towards groups with runs, a reason for every
answer, absurd input dropped with a note, and a rolling origin that never sees the future."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgwe.optimizer.runtime import (
    LEVELS,
    PRIOR,
    Example,
    Level,
    RuntimeModel,
    Timed,
    expected_seconds,
    fit,
    rolling_origin,
)

LEVELS_KGWE = (
    Level("runtime", "of runtime {0}"),
    Level("namespace", "of runtime {0} in {1}"),
)


def ex(runtime: str, namespace: str, seconds: float) -> Example:
    return Example(((runtime,), (runtime, namespace)), seconds)


def keys(runtime: str, namespace: str) -> tuple[tuple[str, ...], ...]:
    return ((runtime,), (runtime, namespace))


def test_no_history_is_the_prior_and_says_so():
    p = fit([], LEVELS_KGWE).predict(keys("torch", "ml"))
    assert not p.from_model and "no finished run recorded yet" in p.fallback
    assert p.value == pytest.approx(PRIOR[0.5]) and p.at(0.9) == pytest.approx(PRIOR[0.9])


def test_a_kind_never_seen_falls_back_to_all_runs_and_names_what_is_missing():
    model = fit([ex("torch", "ml", 100)] * 20, LEVELS_KGWE)
    p = model.predict(keys("jax", "ml"))
    assert not p.from_model
    assert p.fallback == "no finished run of runtime jax yet: the median of all 20 finished runs"
    one = fit([ex("torch", "ml", 100)], LEVELS_KGWE).predict(keys("torch", "ml"))
    assert one.reason == "from 1 finished run of runtime torch in ml (of 1 in all)"
    assert p.value == pytest.approx(100 ** (20 / 21) * 1186 ** (1 / 21))  # 20 runs against the prior's 1


def test_the_reason_names_the_most_specific_group_with_runs():
    runs = [ex("torch", "ml-research", 3600)] * 37 + [ex("torch", "other", 60)] * 100
    p = fit(runs, LEVELS_KGWE).predict(keys("torch", "ml-research"))
    assert p.from_model
    assert p.reason == "from 37 finished runs of runtime torch in ml-research (of 137 in all)"
    assert p.samples == 37
    assert 2000 < p.value < 3600  # shrunk towards the runtime's other runs, mostly its own


def test_one_run_barely_moves_a_well_known_runtime():
    runs = [ex("torch", "a", 100)] * 200 + [ex("torch", "b", 10_000)]
    p = fit(runs, LEVELS_KGWE).predict(keys("torch", "b"))
    assert p.value < 400  # 1 run against 3 pseudo-runs of the 201 runs of torch


def test_absurd_durations_are_dropped_and_noted():
    runs = [ex("t", "n", 60), ex("t", "n", -5), ex("t", "n", math.nan), ex("t", "n", 10**9)]
    model = fit(runs, LEVELS_KGWE)
    assert (model.runs, model.dropped) == (1, 3)
    assert model.notes == ("3 run(s) dropped: negative, absurd or not finite durations",)


def test_params_round_trip_and_garbage_is_refused():
    model = fit([ex("t", "n", s) for s in (10, 20, 30, 400)], LEVELS_KGWE)
    again = RuntimeModel.from_params(model.to_params())
    assert again is not None
    assert again.predict(keys("t", "n")).to_status() == model.predict(keys("t", "n")).to_status()
    for bad in ({}, {"quantiles": [0.5]}, {**model.to_params(), "groups": [[["x"], 1, [1.0]]]}, {"x": 1}):
        assert RuntimeModel.from_params(bad) is None
    assert RuntimeModel.from_params({**model.to_params(), "shrink": -1}) is None


@given(st.lists(st.floats(0, 1e6), max_size=40), st.sampled_from(["t", "u"]))
def test_predictions_are_ordered_non_negative_quantiles(seconds, runtime):
    p = fit([ex("t", "n", s) for s in seconds], LEVELS_KGWE).predict(keys(runtime, "n"))
    values = [p.quantiles[q] for q in LEVELS]
    assert all(v >= 0 for v in values) and values == sorted(values)
    assert p.at(0.1) <= p.value <= p.at(0.9)
    assert expected_seconds(p) > 0


def test_expected_duration_is_the_mean_of_the_log_normal_through_the_interval():
    p = fit([ex("t", "n", 100)] * 1000, LEVELS_KGWE).predict(keys("t", "n"))
    assert expected_seconds(p) == pytest.approx(100, rel=0.05)  # no spread: the mean is the value


def test_rolling_origin_predicts_only_from_runs_that_ended_before():
    # 60 short runs end early; then long runs of the same group start after them and end later. Had the
    # long runs leaked into their own predictions, the model would predict long.
    early = [Timed(ex("t", "n", 10), start=i, end=i + 10) for i in range(60)]
    late = [Timed(ex("t", "n", 10_000), start=1000 + i, end=20_000 + i) for i in range(30)]
    scores, rows = rolling_origin(early + late, LEVELS_KGWE, warmup=50)
    assert scores.examples == 31  # the last early run (started at 59, when 50 had ended) and the 30 late
    assert all(pred.value < 20 for _, pred, _ in rows)
    assert all(gm == 10 for _, _, gm in rows)
    assert scores.p90_coverage == 1 / 31  # every late run outlasts a bound learned from short ones
