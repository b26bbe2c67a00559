"""Budgets and forecasts: spend to date, burn rate, forecast, alerts and Enforce quotas."""

from __future__ import annotations

import math
import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from kgwe.cost.budgets import (
    Alert,
    BudgetSpec,
    budget_from_policy,
    budget_period,
    evaluate_budget,
    quota_decisions,
)
from kgwe.cost.forecast import forecast_daily, rolling_origin_mape, seasonal_naive
from kgwe.policy.loader import load_repository
from kgwe.resources import sample_repo_dir

SPEC = BudgetSpec(
    "ml",
    "ml-team",
    ("ml-a", "ml-b"),
    "Monthly",
    Decimal("1000"),
    quota={"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 14},
    alerts=(Alert(Decimal(50)), Alert(Decimal(80)), Alert(Decimal(100), "Enforce")),
)


def spend(per_day: str, start: date, days: int) -> dict[date, Decimal]:
    return {start + timedelta(days=i): Decimal(per_day) for i in range(days)}


def test_spend_burn_rate_and_forecast_at_mid_month():
    now = datetime(2026, 11, 11, 0, 0, tzinfo=UTC)  # 10 full days elapsed in November
    status = evaluate_budget(SPEC, spend("30", date(2026, 10, 1), 41), now)
    assert status.spent == Decimal("300.00") and status.burn_rate_per_day == Decimal("30.00")
    assert status.forecast_end == Decimal("900.00")  # a flat series forecasts flat
    assert status.used_ratio == Decimal("0.3000") and status.fired == () and not status.forecast_over_limit


def test_alerts_fire_in_order_and_enforce_caps_at_current_use_then_lifts_next_period():
    history = spend("40", date(2026, 10, 1), 31) | spend("60", date(2026, 11, 1), 20)
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)
    status = evaluate_budget(SPEC, history, now)
    assert status.spent == Decimal("1200.00")
    assert [a.at_percent for a in status.fired] == [50, 80, 100] and status.enforce
    use = {"ml-a": {"nvidia.com/gpu": 3}, "ml-b": {"nvidia.com/gpu": 12, "nvidia.com/mig-1g.10gb": 2}}
    capped = {d.namespace: d.hard for d in quota_decisions(SPEC, status, use)}
    assert capped == {
        "ml-a": {"requests.nvidia.com/gpu": "3", "requests.nvidia.com/mig-1g.10gb": "0"},
        "ml-b": {"requests.nvidia.com/gpu": "8", "requests.nvidia.com/mig-1g.10gb": "2"},
    }
    december = evaluate_budget(SPEC, history, datetime(2026, 12, 1, 1, tzinfo=UTC))
    assert not december.enforce
    assert all(d.hard["requests.nvidia.com/gpu"] == "8" for d in quota_decisions(SPEC, december, use))


def test_periods():
    at = datetime(2026, 11, 22, 13, tzinfo=UTC)  # a Sunday
    assert budget_period("Weekly", at).since == datetime(2026, 11, 16, tzinfo=UTC)
    assert budget_period("Quarterly", at).until == datetime(2027, 1, 1, tzinfo=UTC)
    assert budget_period("Daily", at).label == "2026-11-22"


def test_forecast_follows_weekly_seasonality_better_than_the_flat_mean():
    rng = random.Random(3)
    series = [100 + 40 * math.sin(2 * math.pi * i / 7) + rng.gauss(0, 3) for i in range(35)]
    ours = rolling_origin_mape(series, forecast_daily)
    naive = rolling_origin_mape(series, seasonal_naive)
    flat = rolling_origin_mape(series, lambda y, h: forecast_daily(y[-6:], h))  # too short: mean fallback
    assert ours < flat and naive < flat
    assert forecast_daily(series, 7).method.startswith("holt-winters")


def test_short_histories_fall_back_and_outages_are_not_extrapolated():
    assert forecast_daily([], 3).values == (0.0, 0.0, 0.0)
    assert forecast_daily([5, 7], 2).method == "mean"
    with_outage = [100.0] * 20 + [0.0]
    assert min(forecast_daily(with_outage, 7).values) > 90


def test_budgets_from_the_sample_repository():
    specs = [budget_from_policy(b) for b in load_repository(sample_repo_dir()).budgets]
    assert specs and all(s.limit > 0 and s.namespaces for s in specs)


def test_metrics_expose_cost_by_team_and_namespace_budget_ratio_and_idle():
    from prometheus_client import CollectorRegistry, generate_latest

    from kgwe.cost.chargeback import chargeback_from_intervals
    from kgwe.cost.metrics import install
    from kgwe.cost.pricing import pricebook
    from kgwe.cost.usage import NodeCapacity, Period, UsageInterval

    h100 = "NVIDIA-H100-80GB-HBM3"
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    period = Period(t0, t0 + timedelta(hours=10))
    cb = chargeback_from_intervals(
        [UsageInterval("p", "ml-a", "ml-team", "n", h100, "whole", 1, t0, t0 + timedelta(hours=10))],
        [NodeCapacity("n", h100, 2, t0)],
        pricebook([{"product": h100, "onDemandPerHour": "2"}]),
        period,
        group_by=("team", "namespace"),
    )
    status = evaluate_budget(SPEC, spend("30", date(2026, 10, 1), 41), datetime(2026, 11, 11, tzinfo=UTC))
    registry = CollectorRegistry()
    install(registry).update(cb, [status])
    text = generate_latest(registry).decode()
    labels = 'currency="USD",namespace="ml-a",period="2026-11-01_2026-11-01",team="ml-team"'
    assert f"kgwe_gpu_cost{{{labels}}} 20.0" in text
    assert 'kgwe_idle_gpu_cost{currency="USD",period="2026-11-01_2026-11-01"} 20.0' in text
    assert 'kgwe_budget_used_ratio{budget="ml",period="2026-11",team="ml-team"} 0.3' in text


def test_alert_events_name_the_threshold_and_the_period():
    from kgwe.cost.budgets import alert_events

    history = spend("40", date(2026, 10, 1), 31) | spend("60", date(2026, 11, 1), 20)
    status = evaluate_budget(SPEC, history, datetime(2026, 11, 20, 12, tzinfo=UTC))
    events = alert_events(status)
    assert [(t, r) for t, r, _ in events] == [
        ("Normal", "BudgetThreshold"),
        ("Normal", "BudgetThreshold"),
        ("Warning", "BudgetEnforced"),
    ]
    assert "2026-11" in events[-1][2] and "capped" in events[-1][2]
    quiet = evaluate_budget(SPEC, spend("1", date(2026, 11, 1), 3), datetime(2026, 11, 4, tzinfo=UTC))
    assert alert_events(quiet) == []
