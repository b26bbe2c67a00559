"""Offline evaluations of the forecaster and the rightsizer on public traces (used by bench/cost.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from kgwe.cost.forecast import forecast_daily, rolling_origin_mape, seasonal_naive
from kgwe.cost.rightsizing import UtilizationSeries, recommend, size_of, undersized_samples


def forecast_accuracy(series: Mapping[str, Sequence[float]], horizon: int = 7) -> dict[str, dict[str, float]]:
    """Rolling-origin MAPE (%) per series for KGWE's forecaster and seasonal-naive."""
    return {
        name: {
            "kgwe": rolling_origin_mape(values, forecast_daily, horizon=horizon),
            "seasonal_naive": rolling_origin_mape(values, seasonal_naive, horizon=horizon),
            "days": float(len(values)),
        }
        for name, values in series.items()
    }


@dataclass(frozen=True)
class RightsizingEvaluation:
    pods: int
    recommended: int
    downsizable: int
    idle: int
    gpu_hours_observed: float
    gpu_hours_saved: float
    cost_saved: Decimal
    test_samples: int
    undersized_samples: int
    pods_with_undersized_sample: int
    profiles: dict[str, int]


def evaluate_rightsizing(
    pods: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]]],
    gpu_product: str,
    price_per_gpu_hour: Decimal,
    *,
    train_fraction: float = 0.5,
) -> RightsizingEvaluation:
    """Each pod is assumed to hold one whole `gpu_product` GPU. The recommendation is made from the
    first `train_fraction` of each series and checked against the rest (never against its own data)."""
    current = size_of(gpu_product, "whole", 1)
    recommended = downsizable = idle = test_samples = under = pods_under = 0
    hours_observed = hours_saved = 0.0
    profiles: dict[str, int] = {}
    for ip, (ct, cv, mt, mv) in sorted(pods.items()):
        nc, nm = int(len(cv) * train_fraction), int(len(mv) * train_fraction)
        span_s = max(ct[-1], mt[-1]) - min(ct[0], mt[0]) if ct and mt else 0.0
        hours_observed += span_s / 3600
        if nc < 2 or nm < 2 or len(cv) - nc < 1 or len(mv) - nm < 1:
            continue
        train_span = max(ct[nc - 1], mt[nm - 1]) - min(ct[0], mt[0])
        rec = recommend(UtilizationSeries("genai", ip, cv[:nc], mv[:nm], train_span), gpu_product, current)
        if rec is None:
            continue
        recommended += 1
        profiles[rec.recommended.label] = profiles.get(rec.recommended.label, 0) + 1
        idle += rec.idle
        missed = undersized_samples(rec, cv[nc:], mv[nm:])
        test_samples += (len(cv) - nc) + (len(mv) - nm)
        under += missed
        pods_under += missed > 0
        if rec.downsizable:
            downsizable += 1
            hours_saved += float(current.gpu_share - rec.recommended.gpu_share) * span_s / 3600
    saved = (Decimal(repr(hours_saved)) * price_per_gpu_hour).quantize(Decimal("0.01"))
    return RightsizingEvaluation(
        pods=len(pods),
        recommended=recommended,
        downsizable=downsizable,
        idle=idle,
        gpu_hours_observed=hours_observed,
        gpu_hours_saved=hours_saved,
        cost_saved=saved,
        test_samples=test_samples,
        undersized_samples=under,
        pods_with_undersized_sample=pods_under,
        profiles=dict(sorted(profiles.items())),
    )
