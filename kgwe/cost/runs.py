"""Cost per completed GPUWorkload run (pure): what a batch workload that finished cost, all attempts included.

A batch GPUWorkload runs as attempt 0, and after a member failure the controller restarts the whole gang as
attempt 1, 2, ... (its pods carry the attempt in their names). A completed workload's cost is every attempt's
GPU time at the PricingCatalog's prices; the attempts before the one that completed are shown apart, since
they are what failures cost. A team's cost per completed run is the mean over its workloads that completed in
the period.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from kgwe.cost.allocate import cents_to_decimal, quantized, round_cents
from kgwe.cost.chargeback import KeyUsage

_HOUR = 3600


@dataclass(frozen=True)
class RunCost:
    namespace: str
    workload: str
    team: str
    completed_at: datetime
    attempts: int  # 1 + gang restarts
    gpu_hours: Decimal
    cost: Decimal  # every attempt
    failed_attempts_cost: Decimal  # the attempts before the one that completed


@dataclass(frozen=True)
class TeamRuns:
    team: str
    runs: int
    cost: Decimal
    mean_cost: Decimal
    failed_attempts_cost: Decimal


def run_cost(
    namespace: str,
    workload: str,
    team: str,
    completed_at: datetime,
    final_run: int,
    pods: Iterable[tuple[int, KeyUsage]],
) -> RunCost:
    """One completed workload from its pods' usage, each with the attempt it belongs to."""
    held = cost = failed = Fraction(0)
    for run, use in pods:
        held += use.gpu_seconds
        cost += use.cost
        if run < final_run:
            failed += use.cost
    return RunCost(
        namespace=namespace,
        workload=workload,
        team=team,
        completed_at=completed_at,
        attempts=final_run + 1,
        gpu_hours=quantized(held / _HOUR, "0.001"),
        cost=cents_to_decimal(round_cents(cost)),
        failed_attempts_cost=cents_to_decimal(round_cents(failed)),
    )


def by_team(runs: Sequence[RunCost]) -> list[TeamRuns]:
    """Per team: completed runs, their total and mean cost (of the rounded run costs: the table adds up)."""
    teams: dict[str, list[RunCost]] = {}
    for r in runs:
        teams.setdefault(r.team, []).append(r)
    out = []
    for team, members in sorted(teams.items()):
        total = sum((r.cost for r in members), Decimal("0.00"))
        out.append(
            TeamRuns(
                team=team,
                runs=len(members),
                cost=total,
                mean_cost=(total / len(members)).quantize(Decimal("0.01")),
                failed_attempts_cost=sum((r.failed_attempts_cost for r in members), Decimal("0.00")),
            )
        )
    return out
