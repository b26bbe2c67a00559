"""Pure status: what the children of a GPUWorkload say -> conditions, phase, placements, retry decisions.

Condition types: Admitted, PodsScheduled, PodsReady, Complete, Failed, Suspended, GPUsHealthy
(metav1.Condition, with observedGeneration; set and read with kgwe.runtime.conditions). The phase
(Pending/Scheduled/Running/Succeeded/Failed) is derived from them, for print columns. A member failure (its
Job Failed; disruptions are ignored by the Job's podFailurePolicy) restarts the whole gang after an
exponential backoff with jitter, up to retryPolicy.maxRetries.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kgwe.policy.cluster_kinds import Condition
from kgwe.policy.gpu_workload import GPUWorkload, RetryPolicy
from kgwe.runtime import conditions
from kgwe.runtime.conditions import is_true
from kgwe.vocab import GPU_INDEX_ANNOTATION

CONDITION_TYPES = ("Admitted", "PodsScheduled", "PodsReady", "Complete", "Failed", "Suspended")
GPUS_HEALTHY = "GPUsHealthy"  # set only while a pod of the run is placed


def backoff_seconds(policy: RetryPolicy, retry: int, rng: random.Random | None = None) -> float:
    """Delay before restart number `retry` (0-based): min(cap, base * 2**retry), then ± jitter."""
    delay = float(min(policy.max_backoff_seconds, policy.backoff_seconds * 2 ** min(retry, 30)))
    if policy.jitter:
        r = (rng or random).uniform(-policy.jitter, policy.jitter)
        delay *= 1 + r
    return max(0.0, min(float(policy.max_backoff_seconds), delay))


def derive_phase(conditions: Sequence[Condition]) -> str:
    if is_true(conditions, "Failed"):
        return "Failed"
    if is_true(conditions, "Complete"):
        return "Succeeded"
    if is_true(conditions, "PodsReady"):
        return "Running"
    if is_true(conditions, "PodsScheduled"):
        return "Scheduled"
    return "Pending"


@dataclass
class RunView:
    """The current run's children as read from the cluster (plain dicts)."""

    jobs: list[dict[str, Any]] = field(default_factory=list)
    deployments: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)


def failed_job(view: RunView) -> Mapping[str, Any] | None:
    return next((j for j in view.jobs if is_true(conditions.of(j), "Failed")), None)


def all_complete(view: RunView, roles: int) -> bool:
    return len(view.jobs) == roles and all(is_true(conditions.of(j), "Complete") for j in view.jobs)


def live_pods(view: RunView) -> list[dict[str, Any]]:
    return [
        p
        for p in view.pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]


def _ready(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and is_true(conditions.of(pod), "Ready")


def placements(view: RunView) -> list[dict[str, Any]]:
    """pod -> node -> GPU indices (the agent's kgwe.nvidia.io/gpu-index annotation, when written)."""
    out = []
    for p in sorted(live_pods(view), key=lambda p: p["metadata"]["name"]):
        node = (p.get("spec") or {}).get("nodeName")
        if not node:
            continue
        raw = ((p.get("metadata") or {}).get("annotations") or {}).get(GPU_INDEX_ANNOTATION) or ""
        gpus = [int(x) for x in raw.split(",") if x.strip().isdigit()]
        out.append({"pod": p["metadata"]["name"], "node": node, "gpus": gpus})
    return out


def unhealthy_placements(
    placements: Sequence[Mapping[str, Any]],
    namespace: str,
    node_faults: Mapping[str, Mapping[int, str]],
    node_holders: Mapping[str, Mapping[int, str]],
) -> list[str]:
    """ "pod on node GPU i (reason)" for every pod of the run that holds a GPU the agent reports unhealthy.

    A pod's GPUs are its kgwe.nvidia.io/gpu-index annotation, else what the node's kgwe.nvidia.io/gpu-pods
    annotation (the kubelet's view) says it holds; a pod whose GPUs are not known is not claimed."""
    out = []
    for placed in placements:
        node, pod = placed["node"], placed["pod"]
        sick = node_faults.get(node) or {}
        if not sick:
            continue
        gpus = list(placed.get("gpus") or [])
        if not gpus:
            holders = node_holders.get(node) or {}
            gpus = sorted(i for i, who in holders.items() if who == f"{namespace}/{pod}")
        out += [f"{pod} on {node} GPU {i} ({sick[i]})" for i in gpus if i in sick]
    return out


@dataclass
class Progress:
    """What the run's pods say, for conditions."""

    total: int
    scheduled: int
    ready: int
    nodes: list[str]


def progress(wl: GPUWorkload, view: RunView) -> Progress:
    pods = live_pods(view)
    scheduled = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
    nodes = sorted({p["spec"]["nodeName"] for p in scheduled})
    return Progress(wl.spec.total_pods, len(scheduled), sum(1 for p in pods if _ready(p)), nodes)


def gang_timed_out(run_start: datetime | None, timeout_seconds: int, now: datetime) -> bool:
    return run_start is not None and now - run_start > timedelta(seconds=timeout_seconds)
