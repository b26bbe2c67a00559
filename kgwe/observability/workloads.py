"""Pure GPUWorkload statistics for the scheduling dashboard and the gang-wait alert: how many workloads
are in each phase, and how long the oldest gang of each namespace has waited for all its pods to be
scheduled (labels: phase, namespace — never a workload name)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, get_args

from kgwe.policy.gpu_workload import Phase
from kgwe.runtime.conditions import find
from kgwe.timestamps import parse_rfc3339

PHASES: tuple[str, ...] = get_args(Phase)
FINISHED = frozenset(("Succeeded", "Failed"))


def _condition(status: Mapping[str, Any], ctype: str) -> Mapping[str, Any]:
    return find(status.get("conditions"), ctype) or {}


def workload_stats(
    items: Sequence[Mapping[str, Any]], now: datetime
) -> tuple[Counter[str], dict[str, float]]:
    """(workloads per phase — every phase present, 0 included; namespace -> seconds the oldest unfinished
    gang has waited for all its pods to be scheduled, counted from admission — 0 for a namespace whose
    unfinished gangs are all scheduled, so a dashboard shows "no wait" rather than no data)."""
    phases: Counter[str] = Counter(dict.fromkeys(PHASES, 0))
    waits: dict[str, float] = {}
    for item in items:
        meta = item.get("metadata") or {}
        status = item.get("status") or {}
        phase = status.get("phase") or "Pending"
        if phase in phases:
            phases[phase] += 1
        if phase in FINISHED:
            continue
        ns = str(meta.get("namespace", ""))
        if _condition(status, "PodsScheduled").get("status") == "True":
            waits.setdefault(ns, 0.0)
            continue
        admitted = _condition(status, "Admitted")
        since = (
            parse_rfc3339(admitted.get("lastTransitionTime")) if admitted.get("status") == "True" else None
        )
        since = since or parse_rfc3339(meta.get("creationTimestamp"))
        if since is None:
            continue
        waits[ns] = max(waits.get(ns, 0.0), max(0.0, (now - since).total_seconds()))
    return phases, waits
