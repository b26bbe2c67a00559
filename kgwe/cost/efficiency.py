"""Cost efficiency: useful GPU work per unit of money, per team and per GPUWorkload (pure).

Useful GPU work is the GPU-hours a group held, weighted by how busy DCGM saw them
(DCGM_FI_PROF_GR_ENGINE_ACTIVE, the mean over a pod's devices, 0..1: PrometheusClient.pod_engine_activity).
The score is busy GPU-hours per 100 units of the currency (an H100 at 4.10/h kept fully busy scores 24.39),
over the pods DCGM measured; its inverse is what one busy GPU-hour cost. Without any DCGM measurement of the
group the score falls back to allocation only (every held GPU-hour counted busy, an upper bound) and says so
in `basis`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from kgwe.cost.allocate import cents_to_decimal, quantized, round_cents
from kgwe.cost.chargeback import KeyUsage
from kgwe.cost.workload_facts import PodKey

DCGM = "DCGM"
ALLOCATION_ONLY = "allocation only"
PER = 100  # the score counts busy GPU-hours per this many units of money
_HOUR = 3600


@dataclass(frozen=True)
class Efficiency:
    subject: str  # a team, or namespace/workload
    gpu_hours: Decimal  # held, all pods
    cost: Decimal  # of those GPU-hours
    measured_share: Decimal  # of the GPU-hours, the share DCGM measured (0..1)
    activity: Decimal | None  # mean engine activity of the measured GPU-hours (0..1); None on allocation only
    busy_gpu_hours: Decimal  # measured GPU-hours × activity (allocation only: every held GPU-hour)
    score: Decimal | None  # busy GPU-hours per PER units of money; None when nothing was paid
    cost_per_busy_gpu_hour: Decimal | None
    basis: str  # DCGM or ALLOCATION_ONLY


def _activity(value: float | None) -> Fraction | None:
    """A usable measurement (finite, 0..1), as an exact fraction; else None (never a guess)."""
    if value is None or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return None
    return Fraction(value)


def efficiency(
    subject: str, pods: Iterable[tuple[PodKey, KeyUsage]], activity: Mapping[PodKey, float] | None
) -> Efficiency:
    """The score of one group of pods; `activity` None means no DCGM source at all."""
    held = cost = measured = measured_cost = busy = Fraction(0)
    for key, use in pods:
        held += use.gpu_seconds
        cost += use.cost
        act = _activity(activity.get(key)) if activity is not None else None
        if act is not None:
            measured += use.gpu_seconds
            measured_cost += use.cost
            busy += use.gpu_seconds * act
    basis = DCGM if measured > 0 else ALLOCATION_ONLY
    if basis == ALLOCATION_ONLY:
        busy, measured_cost = held, cost
    score = busy / _HOUR / measured_cost * PER if measured_cost > 0 else None
    return Efficiency(
        subject=subject,
        gpu_hours=_hours(held),
        cost=cents_to_decimal(round_cents(cost)),
        measured_share=quantized(measured / held if held else Fraction(0), "0.01"),
        activity=quantized(busy / measured, "0.01") if basis == DCGM else None,
        busy_gpu_hours=_hours(busy),
        score=quantized(score, "0.01") if score is not None else None,
        cost_per_busy_gpu_hour=(
            cents_to_decimal(round_cents(measured_cost / busy * _HOUR)) if busy > 0 else None
        ),
        basis=basis,
    )


def by_team(
    pods: Mapping[tuple[str, ...], KeyUsage], activity: Mapping[PodKey, float] | None
) -> list[Efficiency]:
    """Per team, from usage keyed (team, namespace, pod)."""
    teams: dict[str, list[tuple[PodKey, KeyUsage]]] = {}
    for (team, namespace, pod), use in pods.items():
        teams.setdefault(team, []).append(((namespace, pod), use))
    return [efficiency(team, members, activity) for team, members in sorted(teams.items())]


def _hours(seconds: Fraction) -> Decimal:
    return quantized(seconds / _HOUR, "0.001")
