"""Held-out scores: the definitions every model's figures rest on."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgwe.optimizer import scores

finite = st.floats(-1e6, 1e6)


def test_small_cases():
    assert scores.mae([1, 2, 3], [1, 1, 1]) == 1
    assert scores.coverage([1, 5, 9], [5, 5, 5]) == pytest.approx(2 / 3)
    assert scores.interval_coverage([1, 5, 9], [2, 2, 2], [9, 9, 9]) == pytest.approx(2 / 3)
    assert scores.pinball([10], [0], 0.9) == pytest.approx(9.0)
    assert scores.pinball([0], [10], 0.9) == pytest.approx(1.0)
    assert scores.mape([100, 0, 50], [110, 5, 50]) == pytest.approx(5.0)
    assert scores.ratio(0, 0) == 1.0 and math.isinf(scores.ratio(1, 0)) and scores.ratio(1, 2) == 0.5
    assert scores.mae([], []) == 0.0 and scores.coverage([], []) == 1.0


def test_lengths_must_agree():
    with pytest.raises(ValueError, match="2 observations but 1"):
        scores.mae([1, 2], [1])


@given(st.lists(finite, min_size=1, max_size=50), st.floats(0, 1))
def test_quantile_is_numpys_linear_quantile(values, level):
    assert scores.quantile(values, level) == pytest.approx(float(np.quantile(values, level)), abs=1e-6)


@given(st.lists(finite, min_size=1, max_size=50))
def test_the_median_minimises_the_absolute_error_among_the_values(values):
    best = min(scores.mae(values, [v] * len(values)) for v in values)
    assert scores.mae(values, [scores.median(values)] * len(values)) <= best + 1e-6
