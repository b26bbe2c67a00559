"""The spend forecast against the aim of a MAPE 40% below seasonal-naive, and why the data cannot reach it.

The figure is bench/cost.py's: rolling origin (7-day horizon, from 14 days of history on) over the two
public daily series, the MAPE of KGWE's forecaster (kgwe.cost.forecast) averaged over the series, over the
same average for seasonal-naive. Beside it, what bounds any forecaster on this data:

- `oracle_flat`: a forecaster told, at every origin, the best constant for the coming week in hindsight (the
  value minimizing that week's MAPE). The series have no weekly pattern to exploit (seasonal-naive loses to
  naive on both), so a flat forecast is the natural family, and this is its floor;
- `without_outages`: the MAPE with the days below 25% of the recent median (outages, the forecaster's own
  cleaning rule) left out of the scoring only — a single outage day no forecaster could know of holds a
  third of the error on Philly.
- the other well-known forecasters tried (statsmodels), each scored the same way.
Pure: daily series in, figures out.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kgwe.cost.forecast import (
    OUTAGE_FRACTION,
    Forecast,
    clean_outages,
    forecast_daily,
    seasonal_naive,
    smoothing,
)
from kgwe.optimizer.registry import Evaluation
from kgwe.optimizer.scores import ratio

MODEL_NAME = "spend"
HORIZON = 7
MIN_TRAIN = 14
AIM = 0.6  # MAPE at most 60% of seasonal-naive's: "40% lower"

Forecaster = Callable[[Sequence[float], int], Forecast]


def _errors(series: Sequence[float], forecaster: Forecaster) -> list[tuple[int, float]]:
    """(day index, absolute percentage error) of every forecast day of the rolling origin."""
    y = [float(v) for v in series]
    out = []
    for origin in range(MIN_TRAIN, len(y) - HORIZON + 1):
        predicted = forecaster(y[:origin], HORIZON).values
        for i, (p, a) in enumerate(zip(predicted, y[origin : origin + HORIZON], strict=True)):
            if a != 0:
                out.append((origin + i, abs(p - a) / abs(a)))
    return out


def _mape(errors: Sequence[tuple[int, float]], skip: frozenset[int] = frozenset()) -> float:
    kept = [e for day, e in errors if day not in skip]
    return 100.0 * float(np.mean(kept)) if kept else float("nan")


def _share(errors: Sequence[tuple[int, float]], days: frozenset[int]) -> float:
    """The share of the summed error that falls on `days`."""
    total = sum(e for _, e in errors)
    return sum(e for day, e in errors if day in days) / total if total else 0.0


def outage_days(series: Sequence[float]) -> frozenset[int]:
    """Days below OUTAGE_FRACTION of the series' median (the forecaster's cleaning rule, applied to the
    whole series: an evaluation may look at all of it)."""
    y = np.asarray(series, dtype=float)
    return frozenset(int(i) for i in np.flatnonzero(y < OUTAGE_FRACTION * float(np.median(y))))


def oracle_flat(series: Sequence[float]) -> Forecaster:
    """At each origin, the constant that minimizes the coming week's MAPE (a 1/actual-weighted median)."""
    y = [float(v) for v in series]

    def forecast(history: Sequence[float], horizon: int) -> Forecast:
        ahead = np.asarray([a for a in y[len(history) : len(history) + horizon] if a != 0], dtype=float)
        if ahead.size == 0:
            return Forecast((0.0,) * horizon, "oracle-flat")
        order = np.argsort(ahead)
        weights = np.cumsum(1.0 / ahead[order])
        best = float(ahead[order][np.searchsorted(weights, weights[-1] / 2)])
        return Forecast((best,) * horizon, "oracle-flat")

    return forecast


def _flat(fn: Callable[[np.ndarray, int], np.ndarray], name: str) -> Forecaster:
    def forecast(history: Sequence[float], horizon: int) -> Forecast:
        y = np.asarray(history, dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # statsmodels' convergence chatter on short series
            values = np.maximum(np.asarray(fn(clean_outages(y), horizon), dtype=float), 0.0)
        return Forecast(tuple(float(v) for v in values), name)

    return forecast


def _theta(y: np.ndarray, horizon: int) -> np.ndarray:
    from statsmodels.tsa.forecasting.theta import ThetaModel

    return np.asarray(ThetaModel(y, period=7).fit().forecast(horizon))


def _arima(y: np.ndarray, horizon: int) -> np.ndarray:
    from statsmodels.tsa.arima.model import ARIMA

    return np.asarray(ARIMA(y, order=(1, 1, 1)).fit().forecast(horizon))


ALTERNATIVES: dict[str, Forecaster] = {
    "naive (last day)": _flat(lambda y, h: np.repeat(y[-1], h), "naive"),
    "median of 7 days": _flat(lambda y, h: np.repeat(np.median(y[-7:]), h), "median7"),
    "simple exponential smoothing": _flat(lambda y, h: smoothing(y, h), "ses"),
    "Holt, damped trend": _flat(lambda y, h: smoothing(y, h, trend="add", damped_trend=True), "holt"),
    "theta (weekly)": _flat(_theta, "theta"),
    "ARIMA(1,1,1)": _flat(_arima, "arima"),
}


@dataclass(frozen=True)
class SpendEvaluation:
    per_series: dict[str, dict[str, float]]  # name -> figure -> MAPE %
    alternatives: dict[str, float]  # forecaster -> MAPE averaged over the series / seasonal-naive's

    def ratio(self, key: str, baseline: str = "seasonal_naive") -> float:
        """The MAPE `key` averaged over the series, over `baseline`'s average (bench/cost.py's figure)."""
        mine = float(np.mean([r[key] for r in self.per_series.values()]))
        return ratio(mine, float(np.mean([r[baseline] for r in self.per_series.values()])))

    def figures(self) -> dict[str, float]:
        return {
            "forecast_mape_ratio_to_seasonal_naive": round(self.ratio("kgwe"), 4),
            "forecast_oracle_flat_ratio_to_seasonal_naive": round(self.ratio("oracle_flat"), 4),
            "forecast_mape_ratio_without_outage_days": round(
                self.ratio("kgwe_without_outages", "seasonal_naive_without_outages"), 4
            ),
        }


def evaluate_spend(series: Mapping[str, Sequence[float]], *, alternatives: bool = True) -> SpendEvaluation:
    per: dict[str, dict[str, float]] = {}
    for name, values in series.items():
        skip = outage_days(values)
        mine, naive = _errors(values, forecast_daily), _errors(values, seasonal_naive)
        per[name] = {
            "kgwe": _mape(mine),
            "seasonal_naive": _mape(naive),
            "oracle_flat": _mape(_errors(values, oracle_flat(values))),
            "kgwe_without_outages": _mape(mine, skip),
            "seasonal_naive_without_outages": _mape(naive, skip),
            "outage_days": float(len(skip)),
            "outage_share_of_kgwe_error": (
                sum(e for day, e in mine if day in skip) / total
                if (total := sum(e for _, e in mine))
                else 0.0
            ),
            "days": float(len(values)),
        }
    naive_mean = float(np.mean([r["seasonal_naive"] for r in per.values()]))
    alt = {}
    if alternatives:
        for label, forecaster in ALTERNATIVES.items():
            mapes = [_mape(_errors(values, forecaster)) for values in series.values()]
            alt[label] = float(np.mean(mapes)) / naive_mean
    return SpendEvaluation(per, alt)


def lines(ev: SpendEvaluation) -> tuple[str, ...]:
    f = ev.figures()
    out = [
        f"{name}: MAPE KGWE {r['kgwe']:.2f}% vs seasonal-naive {r['seasonal_naive']:.2f}%; "
        f"a clairvoyant flat forecast {r['oracle_flat']:.2f}%; outage days {r['outage_days']:.0f} hold "
        f"{r['outage_share_of_kgwe_error']:.0%} of KGWE's error"
        for name, r in ev.per_series.items()
    ]
    out.append(
        f"MAPE ratio to seasonal-naive {f['forecast_mape_ratio_to_seasonal_naive']:.3f} (aim <= {AIM}); "
        f"clairvoyant flat {f['forecast_oracle_flat_ratio_to_seasonal_naive']:.3f}; outage days unscored "
        f"{f['forecast_mape_ratio_without_outage_days']:.3f}"
    )
    if ev.alternatives:
        tried = ", ".join(f"{k} {v:.3f}" for k, v in ev.alternatives.items())
        out.append(f"other forecasters, same ratio: {tried}")
    return tuple(out)


def bench_series(data_dir: Path | None = None) -> dict[str, list[float]]:
    """The two daily series bench/cost.py scores the forecaster on."""
    from kgwe.cost import datasets

    return {
        "helios-earth-vc6YE (GPU-hours/day)": datasets.helios_earth_daily_gpu_hours(data_dir),
        "philly-node-sequence (node-hours/day)": datasets.philly_daily_node_hours(data_dir),
    }


def evaluate(data_dir: Path, quick: bool) -> Evaluation:
    """The registry's evaluator (`quick`: without the other forecasters, which take minutes)."""
    ev = evaluate_spend(bench_series(data_dir), alternatives=not quick)
    return Evaluation(MODEL_NAME, ev.figures(), lines(ev))
