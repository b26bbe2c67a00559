"""Budgets: spend to date, burn rate, end-of-period forecast, threshold alerts and Enforce quotas.

Pure: the caller supplies daily spend (from chargeback by day) and the time. `action: Enforce` caps
each budgeted namespace's ResourceQuota at what it currently uses once the threshold is reached, so
running work continues but nothing new starts; the next period's status has no fired Enforce alert,
so the normal quota comes back (the reconciler applies whatever `quota_decisions` returns).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from kgwe.cost.allocate import CENT
from kgwe.cost.forecast import Forecast, forecast_daily
from kgwe.cost.usage import Period, ensure_utc, month_start, next_month
from kgwe.errors import KgweError
from kgwe.policy.budget import GPUBudget
from kgwe.vocab import BUDGET_QUOTA_NAME, DEFAULT_CURRENCY, DEFAULT_PREDICTED_COST_ADMISSION, quota_key

PERIODS = ("Daily", "Weekly", "Monthly", "Quarterly", "Yearly")
QUOTA_NAME = BUDGET_QUOTA_NAME


@dataclass(frozen=True)
class Alert:
    at_percent: Decimal
    action: str = "Notify"


@dataclass(frozen=True)
class BudgetSpec:
    name: str
    team: str
    namespaces: tuple[str, ...]
    period: str
    limit: Decimal
    currency: str = DEFAULT_CURRENCY
    quota: Mapping[str, int] = field(default_factory=dict)
    alerts: tuple[Alert, ...] = ()
    predicted_cost_admission: str = DEFAULT_PREDICTED_COST_ADMISSION  # kgwe.optimizer.admission

    def __post_init__(self) -> None:
        if self.period not in PERIODS:
            raise KgweError(f"budget {self.name}: period must be one of {', '.join(PERIODS)}")
        if self.limit <= 0:
            raise KgweError(f"budget {self.name}: limit must be positive")


def budget_from_policy(obj: GPUBudget) -> BudgetSpec:
    """Adapt a kgwe.policy GPUBudget to the plain spec."""
    spec = obj.spec
    return BudgetSpec(
        name=obj.metadata.name,
        team=spec.team,
        namespaces=tuple(spec.namespaces),
        period=spec.period,
        limit=Decimal(spec.limit.amount),
        currency=spec.limit.currency,
        quota=dict(spec.quota),
        alerts=tuple(Alert(Decimal(a.at), a.action) for a in spec.alerts),
        predicted_cost_admission=spec.predicted_cost_admission,
    )


def complete_days(daily_spend: Mapping[date, Decimal], today: date) -> list[float]:
    """Spend of every whole day from the first recorded one up to yesterday (missing days are 0)."""
    if not daily_spend:
        return []
    first = min(daily_spend)
    days = (first + timedelta(days=i) for i in range((today - first).days))
    return [float(daily_spend.get(d, Decimal(0))) for d in days]


def budget_period(kind: str, at: datetime) -> Period:
    """The calendar period (UTC) containing `at`; weeks start on Monday (ISO)."""
    at = ensure_utc(at)
    day = datetime(at.year, at.month, at.day, tzinfo=UTC)
    if kind == "Daily":
        return Period(day, day + timedelta(days=1), label=f"{day:%Y-%m-%d}")
    if kind == "Weekly":
        start = day - timedelta(days=day.weekday())
        return Period(start, start + timedelta(days=7), label=f"{start:%G-W%V}")
    if kind == "Monthly":
        start = month_start(at)
        return Period(start, next_month(start), label=f"{start:%Y-%m}")
    if kind == "Quarterly":
        q_month = 3 * ((at.month - 1) // 3) + 1
        start = datetime(at.year, q_month, 1, tzinfo=UTC)
        end = datetime(at.year + (q_month == 10), (q_month + 2) % 12 + 1, 1, tzinfo=UTC)
        return Period(start, end, label=f"{at.year}-Q{(q_month - 1) // 3 + 1}")
    if kind == "Yearly":
        return Period(
            datetime(at.year, 1, 1, tzinfo=UTC), datetime(at.year + 1, 1, 1, tzinfo=UTC), label=str(at.year)
        )
    raise KgweError(f"unknown budget period {kind!r}")


@dataclass(frozen=True)
class BudgetStatus:
    name: str
    team: str
    period: Period
    currency: str
    limit: Decimal
    spent: Decimal
    used_ratio: Decimal
    burn_rate_per_day: Decimal
    forecast_end: Decimal
    forecast_method: str
    fired: tuple[Alert, ...]
    enforce: bool
    forecast_over_limit: bool

    @property
    def remaining(self) -> Decimal:
        return self.limit - self.spent


def evaluate_budget(spec: BudgetSpec, daily_spend: Mapping[date, Decimal], now: datetime) -> BudgetStatus:
    """Status at `now`. `daily_spend` holds spend per UTC day (history before the period is used only
    to forecast; days after `now` are ignored)."""
    now = ensure_utc(now)
    period = budget_period(spec.period, now)
    today = now.date()
    spent = sum((v for d, v in daily_spend.items() if period.since.date() <= d <= today), Decimal(0))
    elapsed_days = Decimal((now - period.since).total_seconds()) / Decimal(86400)
    burn = spent / elapsed_days if elapsed_days > 0 else Decimal(0)

    history = complete_days(daily_spend, today)
    days_left = (period.until.date() - today).days  # today and the days after it in the period
    prediction: Forecast = forecast_daily(history, days_left)
    today_left = Decimal(
        (datetime.combine(today + timedelta(days=1), datetime.min.time(), UTC) - now).total_seconds()
    ) / Decimal(86400)
    ahead = Decimal(0)
    for i, value in enumerate(prediction.values):
        ahead += Decimal(repr(value)) * (today_left if i == 0 else 1)
    forecast_end = (spent + ahead).quantize(CENT)

    used = (spent / spec.limit) if spec.limit else Decimal(0)
    fired = tuple(a for a in sorted(spec.alerts, key=lambda a: a.at_percent) if used * 100 >= a.at_percent)
    return BudgetStatus(
        name=spec.name,
        team=spec.team,
        period=period,
        currency=spec.currency,
        limit=spec.limit,
        spent=spent.quantize(CENT),
        used_ratio=used.quantize(Decimal("0.0001")),
        burn_rate_per_day=burn.quantize(CENT),
        forecast_end=forecast_end,
        forecast_method=prediction.method,
        fired=fired,
        enforce=any(a.action == "Enforce" for a in fired),
        forecast_over_limit=forecast_end > spec.limit,
    )


@dataclass(frozen=True)
class QuotaDecision:
    namespace: str
    name: str
    hard: dict[str, str]
    capped: bool
    reason: str


def quota_decisions(
    spec: BudgetSpec, status: BudgetStatus, in_use: Mapping[str, Mapping[str, int]]
) -> list[QuotaDecision]:
    """The ResourceQuota `spec.hard` for every budgeted namespace. Normal: the budget's quota.
    Enforced: each resource capped at min(quota, current use in that namespace), so no new GPU pods."""
    out = []
    for ns in spec.namespaces:
        use = {quota_key(k): v for k, v in (in_use.get(ns) or {}).items()}
        hard: dict[str, str] = {}
        for resource, limit in sorted(spec.quota.items()):
            key = quota_key(resource)
            hard[key] = str(min(limit, use.get(key, 0)) if status.enforce else limit)
        used = f"{status.used_ratio * 100:.1f}% of {status.limit} {status.currency}"
        action = "capped at current use" if status.enforce else "not capped"
        reason = f"budget {spec.name} at {used}: {action}"
        out.append(QuotaDecision(ns, QUOTA_NAME, hard, status.enforce, reason))
    return out


def daily_spend_by_team(lines: Iterable[Any], team_index: int = 0) -> dict[str, dict[date, Decimal]]:
    """Chargeback lines grouped by day -> {team: {day: cost}}."""
    out: dict[str, dict[date, Decimal]] = {}
    for line in lines:
        day = date.fromisoformat(line.bucket)
        team = line.key[team_index]
        out.setdefault(team, {})
        out[team][day] = out[team].get(day, Decimal(0)) + line.cost
    return out


def alert_events(status: BudgetStatus) -> list[tuple[str, str, str]]:
    """(event type, reason, message) for each fired threshold and for a forecast over the limit. The
    message names the period, so the recorder bumps one Event per threshold per period, not per refresh."""
    out = []
    for alert in status.fired:
        kind = "Warning" if alert.action == "Enforce" or alert.at_percent >= 100 else "Normal"
        action = "; quotas capped at current use" if alert.action == "Enforce" else ""
        out.append(
            (
                kind,
                "BudgetThreshold" if alert.action == "Notify" else "BudgetEnforced",
                f"budget {status.name} ({status.team}) reached {alert.at_percent}% of {status.limit} "
                f"{status.currency} in {status.period.label}: spent {status.spent}{action}",
            )
        )
    if status.forecast_over_limit and not status.enforce:
        out.append(
            (
                "Warning",
                "BudgetForecastOverLimit",
                f"budget {status.name} ({status.team}) is forecast to spend {status.forecast_end} of "
                f"{status.limit} {status.currency} by the end of {status.period.label}",
            )
        )
    return out
