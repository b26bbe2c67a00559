"""Scores on held-out data, shared by every model's evaluation (pure; plain sequences of numbers).

The figures compare a model with the rule KGWE uses today on the same held-out observations: an error
ratio below 1 means the model beat the rule; a P90 bound's coverage should be near 0.9 (above it the bound
is loose, below it the bound is not a bound)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def mae(actual: Sequence[float], predicted: Sequence[float]) -> float:
    """Mean absolute error (0 for no observations)."""
    _same_length(actual, predicted)
    if not actual:
        return 0.0
    return math.fsum(abs(a - p) for a, p in zip(actual, predicted, strict=True)) / len(actual)


def ratio(model: float, baseline: float) -> float:
    """model / baseline; 1.0 when both are 0 (nothing to improve), inf when only the baseline is 0."""
    if baseline == 0:
        return 1.0 if model == 0 else math.inf
    return model / baseline


def coverage(actual: Sequence[float], upper: Sequence[float]) -> float:
    """The share of observations at or below their upper bound (1.0 for no observations)."""
    _same_length(actual, upper)
    if not actual:
        return 1.0
    return sum(1 for a, u in zip(actual, upper, strict=True) if a <= u) / len(actual)


def interval_coverage(actual: Sequence[float], lower: Sequence[float], upper: Sequence[float]) -> float:
    """The share of observations inside [lower, upper]."""
    _same_length(actual, lower)
    _same_length(actual, upper)
    if not actual:
        return 1.0
    inside = sum(1 for a, lo, hi in zip(actual, lower, upper, strict=True) if lo <= a <= hi)
    return inside / len(actual)


def pinball(actual: Sequence[float], predicted: Sequence[float], level: float) -> float:
    """Mean pinball (quantile) loss at `level`: the proper score of a quantile forecast."""
    _same_length(actual, predicted)
    if not actual:
        return 0.0
    total = math.fsum(
        (level * (a - p)) if a >= p else ((1 - level) * (p - a))
        for a, p in zip(actual, predicted, strict=True)
    )
    return total / len(actual)


def mape(actual: Sequence[float], predicted: Sequence[float]) -> float:
    """Mean absolute percentage error (%) over the observations whose actual value is not 0."""
    _same_length(actual, predicted)
    pairs = [(a, p) for a, p in zip(actual, predicted, strict=True) if a != 0]
    if not pairs:
        return 0.0
    return 100.0 * math.fsum(abs(a - p) / abs(a) for a, p in pairs) / len(pairs)


def median(values: Sequence[float]) -> float:
    """The median (the mean of the middle two for an even count); 0.0 for no values."""
    return quantile(values, 0.5)


def quantile(values: Sequence[float], level: float) -> float:
    """The `level` quantile, linear between order statistics (numpy's default); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * min(1.0, max(0.0, level))
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _same_length(a: Sequence[float], b: Sequence[float]) -> None:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} observations but {len(b)} predictions")
