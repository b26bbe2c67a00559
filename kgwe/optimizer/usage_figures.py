"""Decisions 2 and 4 and the spend forecast in one dict: the figures bench/optimizer.py prints for them.

Pure: the genai per-pod series and the daily spend series in, figures out (the readers are the callers').
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kgwe.optimizer.classes_eval import ClassCheck, check_serving_trace
from kgwe.optimizer.spend_eval import SpendEvaluation, evaluate_spend
from kgwe.optimizer.usage import EARLY_SECONDS
from kgwe.optimizer.usage_eval import PodSeries, UsageEvaluation, evaluate_usage

KEYS = (
    "rightsize_exceed_fraction",
    "rightsize_exceed_fraction_baseline",
    "rightsize_savings_fraction",
    "rightsize_p90_coverage",
    "forecast_mape_ratio_to_seasonal_naive",
)
Figures = dict[str, float | int | None]


def figures(
    pods: Mapping[str, PodSeries],
    daily: Mapping[str, Sequence[float]],
    *,
    early_seconds: float = EARLY_SECONDS,
    alternatives: bool = False,
) -> Figures:
    """KEYS first, then the figures that explain them. `alternatives`: also score other forecasters."""
    return combine(
        evaluate_usage(pods, early_seconds=early_seconds),
        evaluate_spend(daily, alternatives=alternatives),
        check_serving_trace(pods),
    )


def combine(usage: UsageEvaluation, spend: SpendEvaluation, classes: ClassCheck) -> Figures:
    """The three evaluations as one dict, KEYS first (rule curve points, coverage per quantity, class
    checks and the forecast's bounds after them)."""
    out: Figures = {**usage.figures(), **spend.figures(), **classes.figures()}
    return {**{k: out[k] for k in KEYS}, **{k: v for k, v in out.items() if k not in KEYS}}
