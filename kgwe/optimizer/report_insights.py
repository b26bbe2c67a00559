"""The optimizer's part of the cost reports: rightsizing on predicted bounds before a week of history,
the predictions behind it and each pod's workload class — a kgwe.cost.insights.Advisor.

It learns from the same DCGM series the rightsizing reads: every pod of the period watched beyond its first
hour is history for the others (never for itself). Pure: series and held pods in, Insights out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from kgwe.cost.insights import HeldPod, Insights, PodClass, PodPrediction
from kgwe.cost.rightsizing import UtilizationSeries
from kgwe.cost.workload_facts import PodKey
from kgwe.optimizer import classes, usage


def groups_of(pod: HeldPod) -> tuple[str, ...]:
    """The pod's groups, most specific first: its GPUWorkload (or its siblings' common name), namespace."""
    return usage.group_keys(pod.namespace, pod.workload or usage.owner_name(pod.pod))


def advise_pods(series: Sequence[UtilizationSeries], held: Mapping[PodKey, HeldPod]) -> Insights:
    mine = [(s, held[(s.namespace, s.pod)]) for s in series if (s.namespace, s.pod) in held]
    rows = [(s, pod, groups_of(pod), usage.capacity_of(pod.gpu_product, pod.gpus)) for s, pod in mine]
    own = {id(s): usage.peer_of(s, groups, cap) for s, _, groups, cap in rows}
    model = usage.UsageModel(tuple(p for p in own.values() if p is not None)[-usage.MAX_PEERS :])
    recs, predictions, found = [], [], {}
    for s, pod, groups, _cap in rows:
        rec, pred = usage.advise(
            s,
            groups,
            pod.gpu_product,
            pod.current,
            model,
            gpus=pod.gpus,
            price_per_hour=pod.price_per_hour,
            currency=pod.currency,
            exclude=own[id(s)],
        )
        cls = classes.classify(s, pod.gpus)
        found[pod.key] = PodClass(
            pod.namespace, pod.pod, cls.name, cls.reason, classes.declared_class(pod.declared_type)
        )
        if rec is not None:
            recs.append(replace(rec, workload_class=cls.name))
        level = max(pred.memory.quantiles, default=usage.LEVEL)
        predictions.append(
            PodPrediction(
                pod.namespace,
                pod.pod,
                pred.memory.at(0.5),
                pred.memory.at(level),
                pred.compute.at(0.5),
                pred.compute.at(level),
                pred.memory.reason,
                pred.memory.fallback,
            )
        )
    return Insights(tuple(recs), tuple(predictions), found, _notes(model))


def _notes(model: usage.UsageModel) -> tuple[str, ...]:
    memory, compute, scored = usage.holdout_coverage(model)
    history = f"usage model: {len(model.peers)} pod(s) of this period watched beyond their first hour"
    if not scored:
        return (f"{history}; too few to bound others (each group needs {model.min_peers}): today's rule",)
    return (
        f"{history}; each of the newest {scored} held out and predicted from the others: its P90 bound "
        f"held for {_pct(memory)} (peak memory) and {_pct(compute)} (p95 compute)",
        "workload classes: rules on telemetry (KGWE's docs/optimizer-usage.md), checked on a public serving "
        "trace, not fitted to this cluster",
    )


def _pct(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.0%}"
