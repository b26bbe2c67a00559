"""Daily spend forecasts. Pure: a list of numbers in, a list of numbers out.

KGWE's forecaster, chosen on the public allocation series (bench/cost.py reports it honestly):
1. clean: days below 25% of the recent median are treated as outages (telemetry gaps, cluster
   down) and replaced by the median of the normal days — a budget forecast should not extrapolate
   an outage;
2. combine forecasts (a well-known way to be robust when no single model wins): simple exponential
   smoothing, the mean of the last 7 days, and — once two weekly seasons exist (14 days) —
   additive Holt-Winters with weekly seasonality (statsmodels ExponentialSmoothing);
3. short histories fall back to the mean (fewer than 7 days) or SES + mean (7-13 days).
Forecasts are clamped at zero: spend never goes negative.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

SEASON_DAYS = 7
OUTAGE_FRACTION = 0.25


@dataclass(frozen=True)
class Forecast:
    values: tuple[float, ...]
    method: str

    @property
    def total(self) -> float:
        return float(sum(self.values))


def clean_outages(history: np.ndarray) -> np.ndarray:
    """Days below OUTAGE_FRACTION of the recent median replaced by the median of the normal days."""
    y = history.astype(float).copy()
    median = float(np.median(y[-28:]))
    bad = y < OUTAGE_FRACTION * median
    if bad.any() and (~bad).any():
        y[bad] = float(np.median(y[~bad][-28:]))
    return y


def smoothing(y: np.ndarray, horizon: int, **kw: object) -> np.ndarray:
    """statsmodels' ExponentialSmoothing (`kw`: trend, seasonal...) fitted on `y`, `horizon` steps ahead."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter on flat series is not actionable
        fit = ExponentialSmoothing(y, initialization_method="estimated", **kw).fit()
        return np.asarray(fit.forecast(horizon), dtype=float)


def forecast_daily(history: Sequence[float], horizon: int) -> Forecast:
    """Forecast the next `horizon` days of a daily series."""
    if horizon <= 0:
        return Forecast((), "none")
    y = np.asarray([float(v) for v in history], dtype=float)
    if len(y) == 0:
        return Forecast((0.0,) * horizon, "no-history")
    if len(y) < SEASON_DAYS or np.all(y == y[0]):
        return Forecast((max(0.0, float(y.mean())),) * horizon, "mean")
    y = clean_outages(y)
    parts = [smoothing(y, horizon), np.repeat(y[-SEASON_DAYS:].mean(), horizon)]
    method = "ses+mean7"
    if len(y) >= 2 * SEASON_DAYS:
        parts.append(smoothing(y, horizon, seasonal="add", seasonal_periods=SEASON_DAYS))
        method = "holt-winters(weekly)+ses+mean7"
    values = np.maximum(np.mean(parts, axis=0), 0.0)
    return Forecast(tuple(float(v) for v in values), method)


def seasonal_naive(history: Sequence[float], horizon: int, season: int = SEASON_DAYS) -> Forecast:
    """The baseline: same weekday last week."""
    y = [float(v) for v in history]
    if len(y) < season:
        return Forecast((y[-1] if y else 0.0,) * horizon, "naive")
    return Forecast(tuple(y[-season + (i % season)] for i in range(horizon)), "seasonal-naive")


def rolling_origin_mape(
    series: Sequence[float],
    forecaster: Callable[[Sequence[float], int], Forecast],
    *,
    horizon: int = 7,
    min_train: int = 2 * SEASON_DAYS,
) -> float:
    """Mean absolute percentage error (%) over every origin with a full horizon ahead (days with a
    zero actual are left out: their percentage error is undefined)."""
    y = [float(v) for v in series]
    errors: list[float] = []
    for origin in range(min_train, len(y) - horizon + 1):
        predicted = forecaster(y[:origin], horizon).values
        for p, a in zip(predicted, y[origin : origin + horizon], strict=True):
            if a != 0:
                errors.append(abs(p - a) / abs(a))
    if not errors:
        raise ValueError("series too short for a rolling-origin evaluation")
    return 100.0 * float(np.mean(errors))
