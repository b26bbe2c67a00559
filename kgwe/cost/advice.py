"""The cost advice of a period, from plain data (pure): spot candidates, cost efficiency per team and per
GPUWorkload, and the cost of each completed GPUWorkload run. The reports and the metrics both show it.

Inputs: the period's usage aggregated per pod (store.usage_aggregates grouped by team, namespace and pod),
the GPUWorkloads (kgwe.cost.workload_facts), DCGM engine activity per pod when a Prometheus is known, and for
the runs the usage since the earliest completed workload began (a run may start before the period).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from kgwe.cost import efficiency as eff
from kgwe.cost import runs as run_costs
from kgwe.cost import spot
from kgwe.cost.allocate import cents_to_decimal, quantized, round_cents
from kgwe.cost.chargeback import KeyUsage, UsageAggregate, usage_by_key
from kgwe.cost.pricing import PriceBook
from kgwe.cost.usage import Period, to_epoch
from kgwe.cost.workload_facts import PodKey, WorkloadFacts, pods_by_workload

POD_GROUP = ("team", "namespace", "pod")  # how the usage handed to `advise` is grouped


@dataclass(frozen=True)
class Advice:
    currency: str
    spot: tuple[spot.SpotAdvice, ...] = ()
    spot_assumption: str = ""
    team_efficiency: tuple[eff.Efficiency, ...] = ()
    workload_efficiency: tuple[eff.Efficiency, ...] = ()
    runs: tuple[run_costs.RunCost, ...] = ()
    team_runs: tuple[run_costs.TeamRuns, ...] = ()
    activity_source: str = ""  # where DCGM activity came from; "" = none (allocation only)
    workloads_read: bool = True  # False: no GPUWorkloads were at hand (spot and runs unknown, not empty)
    warnings: tuple[str, ...] = field(default=())
    pod_usage: Mapping[PodKey, tuple[Decimal, Decimal]] = field(default_factory=dict)  # GPU-hours, cost


@dataclass
class _Pods:
    """Per pod: its priced usage (merged over teams, should its team have changed) and its team."""

    use: dict[PodKey, KeyUsage] = field(default_factory=dict)
    team: dict[PodKey, str] = field(default_factory=dict)

    def add(self, by_key: Mapping[tuple[str, ...], KeyUsage]) -> None:
        for (team, namespace, pod), use in by_key.items():
            key = (namespace, pod)
            mine = self.use.setdefault(key, KeyUsage())
            mine.gpu_seconds += use.gpu_seconds
            mine.cost += use.cost
            for product, seconds in use.on_demand_gpu_seconds.items():
                mine.on_demand_gpu_seconds[product] = (
                    mine.on_demand_gpu_seconds.get(product, Fraction(0)) + seconds
                )
            if self.team.get(key) is None or use.cost > 0:
                self.team[key] = team

    def team_of(self, pods: Iterable[PodKey]) -> str:
        """The team charged most for these pods (ties: the first by name)."""
        cost: dict[str, Fraction] = {}
        for key in pods:
            cost[self.team[key]] = cost.get(self.team[key], Fraction(0)) + self.use[key].cost
        return min(cost, key=lambda t: (-cost[t], t)) if cost else ""


def advise(
    usage: Iterable[UsageAggregate],
    workloads: Sequence[WorkloadFacts],
    book: PriceBook,
    period: Period,
    now: datetime,
    *,
    activity: Mapping[PodKey, float] | None = None,
    activity_source: str = "",
    run_usage: Iterable[UsageAggregate] | None = None,
    warnings: Sequence[str] = (),
    workloads_read: bool = True,
) -> Advice:
    """The period's advice. `usage` and `run_usage` are grouped by POD_GROUP; `run_usage` (default: `usage`)
    covers the lifetimes of the workloads that completed in the period."""
    by_key, priced = usage_by_key(usage, book)
    pods = _Pods()
    pods.add(by_key)
    mine = pods_by_workload(workloads, pods.use)
    elapsed = max(1, to_epoch(min(now, period.until)) - to_epoch(period.since))
    spot_rows, workload_rows = [], []
    for w in workloads:
        members = [key for key, _ in mine.get((w.namespace, w.name), [])]
        if not members:
            continue
        team = pods.team_of(members)
        spot_rows.append(spot.advise(w, team, [pods.use[k] for k in members], book, elapsed))
        workload_rows.append(
            eff.efficiency(f"{w.namespace}/{w.name}", [(k, pods.use[k]) for k in members], activity)
        )
    runs = _runs(workloads, period, book, pods if run_usage is None else None, run_usage)
    return Advice(
        currency=book.currency,
        spot=tuple(
            sorted(spot_rows, key=lambda a: (not a.movable, -a.saving_per_month, a.namespace, a.workload))
        ),
        spot_assumption=spot.assumption(book),
        team_efficiency=tuple(eff.by_team(by_key, activity)),
        workload_efficiency=tuple(workload_rows),
        runs=tuple(runs),
        team_runs=tuple(run_costs.by_team(runs)),
        activity_source=activity_source if activity is not None else "",
        workloads_read=workloads_read,
        warnings=tuple(sorted({*warnings, *priced})),
        pod_usage={
            key: (quantized(use.gpu_seconds / 3600, "0.001"), cents_to_decimal(round_cents(use.cost)))
            for key, use in sorted(pods.use.items())
        },
    )


def completed_in(workloads: Iterable[WorkloadFacts], period: Period) -> list[WorkloadFacts]:
    """The batch workloads whose Complete condition turned True within the period."""
    return [
        w
        for w in workloads
        if w.batch and w.completed_at is not None and period.since <= w.completed_at < period.until
    ]


def runs_since(workloads: Iterable[WorkloadFacts], period: Period) -> datetime:
    """Where the usage for the runs must start: the earliest creation of a workload completed in the period
    (the period's start when none began before it)."""
    starts = [w.created_at for w in completed_in(workloads, period) if w.created_at is not None]
    return min([period.since, *starts])


def _runs(
    workloads: Sequence[WorkloadFacts],
    period: Period,
    book: PriceBook,
    pods: _Pods | None,
    run_usage: Iterable[UsageAggregate] | None,
) -> list[run_costs.RunCost]:
    done = completed_in(workloads, period)
    if not done:
        return []
    if pods is None:
        pods = _Pods()
        pods.add(usage_by_key(run_usage or (), book)[0])
    mine = pods_by_workload(done, pods.use)
    out = []
    for w in done:
        members = mine.get((w.namespace, w.name), [])
        assert w.completed_at is not None  # completed_in keeps only those
        out.append(
            run_costs.run_cost(
                w.namespace,
                w.name,
                pods.team_of(k for k, _ in members) or w.namespace,
                w.completed_at,
                w.run,
                [(run, pods.use[k]) for k, run in members],
            )
        )
    return sorted(out, key=lambda r: (r.team, r.completed_at, r.namespace, r.workload))
