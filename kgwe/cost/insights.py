"""What the workload optimizer tells the cost reports about the period's pods, as plain data: rightsizing
recommendations (on today's rule or on predicted bounds), the predictions behind them, and each pod's workload
class. The optimizer (kgwe.optimizer.report_insights) builds on the cost engine, so the cost engine only
declares the shapes here and takes an `Advisor` from its caller; without one, rightsizing is today's rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

from kgwe.cost.rightsizing import Recommendation, Size, UtilizationSeries, recommend
from kgwe.cost.workload_facts import PodKey


@dataclass(frozen=True)
class HeldPod:
    """A metered pod of the period: what it holds and, when it belongs to a GPUWorkload, which one."""

    namespace: str
    pod: str
    gpu_product: str
    current: Size
    gpus: int  # devices held (1 for a MIG slice or a share)
    price_per_hour: Decimal | None = None
    currency: str = ""
    workload: str | None = None  # the GPUWorkload's name
    declared_type: str | None = None  # its workloadType

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.pod)


@dataclass(frozen=True)
class PodPrediction:
    """A pod's predicted later use: P50 and P90 of its peak memory (MiB) and p95 compute (GPUs), and from
    what (`reason`) — or `fallback`, why today's rule stood instead."""

    namespace: str
    pod: str
    memory_p50_mib: float
    memory_p90_mib: float
    compute_p50_gpus: float
    compute_p90_gpus: float
    reason: str
    fallback: str | None = None


@dataclass(frozen=True)
class PodClass:
    namespace: str
    pod: str
    name: str  # a kgwe.vocab.WORKLOAD_CLASS_* word
    reason: str
    declared: str | None = None  # the class the GPUWorkload's workloadType stands for, when known


@dataclass(frozen=True)
class Insights:
    recommendations: tuple[Recommendation, ...] = ()
    predictions: tuple[PodPrediction, ...] = ()
    classes: Mapping[PodKey, PodClass] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the models learned from and how they scored on held-out pods


class Advisor(Protocol):
    """Rightsizing, predictions and classes for the held pods from their DCGM series."""

    def __call__(self, series: Sequence[UtilizationSeries], held: Mapping[PodKey, HeldPod]) -> Insights: ...


def rule_only(series: Sequence[UtilizationSeries], held: Mapping[PodKey, HeldPod]) -> Insights:
    """Today's rightsizing (each pod's p95/p90 plus the margin) and nothing predicted or classed."""
    out = []
    for s in series:
        pod = held.get((s.namespace, s.pod))
        if pod is None:
            continue  # not a pod we meter: nothing to compare against
        rec = recommend(
            s, pod.gpu_product, pod.current, price_per_hour=pod.price_per_hour, currency=pod.currency
        )
        if rec is not None:
            out.append(rec)
    return Insights(tuple(out))
