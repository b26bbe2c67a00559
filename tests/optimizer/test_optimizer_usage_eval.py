"""The held-out evaluation of decision 2 and the spend forecast's bounds, on small inputs."""

from __future__ import annotations

import math
import random

import pytest

from kgwe.cost import datasets
from kgwe.cost.forecast import Forecast
from kgwe.optimizer import spend_eval
from kgwe.optimizer.classes_eval import check_serving_trace
from kgwe.optimizer.usage_eval import evaluate_usage, hull_at
from kgwe.optimizer.usage_figures import KEYS, combine

MINUTE = 60.0


def test_hull_mixes_points_with_the_request_and_stops_at_the_curves_end():
    points = [(0.4, 0.3), (0.02, 0.01)]
    assert hull_at(points, 0.0) == 0.0
    assert hull_at(points, 0.01) == pytest.approx(0.005)  # half way to (0.02, 0.01) from the request
    assert hull_at(points, 0.21) == pytest.approx(0.01 + 0.29 * 0.5)
    assert math.isnan(hull_at(points, 0.5))


def spiky_pods(n: int, seed: int = 3):
    """Pods steady at 24 GB in their first hour that spike to 1.3-1.9× later, at low load first."""
    rng = random.Random(seed)
    times = [i * MINUTE for i in range(480)]
    out = {}
    for i in range(n):
        spike = rng.uniform(1.3, 1.9)
        memory = [24_000.0 * (spike if j == 300 + i else 1.0) for j in range(480)]
        compute = [rng.uniform(0, 0.05 if j < 60 else 0.3) for j in range(480)]
        out[f"pod-{i:02d}"] = (times, compute, times, memory)
    return out


def test_held_out_advice_covers_later_use_where_the_first_hour_rule_does_not():
    ev = evaluate_usage(spiky_pods(30), levels=(0.5,), margins=(0.0, 1.0))
    assert ev.pods == 30 and ev.fallbacks == 0
    # today's rule sees 24 GB × 1.15 and sizes 3g.40gb: every pod that spikes above 40 GB (above 1.67×,
    # about a third of them) exceeds it
    assert ev.rule_default_savings == pytest.approx(0.5) and ev.rule_default_exceed > 0.2
    # P90 bounds hold for about 90% of 30 pods (a sample: 25 of 30 is within its spread); the rule's
    # memory need (p95 of the first hour + 15%) holds for none, since every pod spikes by 1.3× or more
    assert ev.memory_coverage >= 0.75 and ev.compute_coverage >= 0.75
    assert ev.rule_memory_coverage == 0
    assert ev.exceed < ev.rule_default_exceed
    f = ev.figures()
    assert f["rightsize_p90_coverage"] == round(min(ev.memory_coverage, ev.compute_coverage), 4)
    assert 0 <= f["rightsize_savings_fraction"] <= 1


def test_too_few_pods_to_hold_out_is_a_clear_error():
    with pytest.raises(ValueError, match="nothing to hold out"):
        evaluate_usage({})


def test_the_clairvoyant_flat_forecast_beats_every_flat_forecast():
    rng = random.Random(5)
    y = [100 + rng.uniform(-20, 20) for _ in range(40)]
    oracle = spend_eval._mape(spend_eval._errors(y, spend_eval.oracle_flat(y)))
    for level in (80.0, 100.0, 120.0):
        flat = spend_eval._mape(spend_eval._errors(y, lambda h, k, v=level: Forecast((v,) * k, "flat")))
        assert oracle <= flat


def test_outage_days_and_their_share_of_the_error():
    y = [100.0] * 24
    y[17] = 5.0
    assert spend_eval.outage_days(y) == frozenset({17})
    ev = spend_eval.evaluate_spend({"s": y}, alternatives=False)
    r = ev.per_series["s"]
    assert r["outage_share_of_kgwe_error"] > 0.9  # a flat series: the outage day is nearly all the error
    assert r["kgwe_without_outages"] < r["kgwe"]
    assert set(ev.figures()) >= {"forecast_mape_ratio_to_seasonal_naive"}


def test_figures_put_the_benchmark_keys_first():
    pods = spiky_pods(22)
    daily = {"noisy": [100.0 + (i * 37 % 11) for i in range(28)]}
    got = combine(
        evaluate_usage(pods), spend_eval.evaluate_spend(daily, alternatives=False), check_serving_trace(pods)
    )
    assert tuple(got)[: len(KEYS)] == KEYS


def test_the_genai_trace_is_read_for_the_evaluation():
    pods = datasets.genai_pod_series()
    assert len(pods) == 143  # pods with both series
    ev = evaluate_usage(dict(sorted(pods.items())[:30]), levels=(), margins=())
    assert ev.pods >= 21 and 0 <= ev.exceed <= 1
