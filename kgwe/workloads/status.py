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
from kgwe.policy.gpu_workload import GPUWorkload, GPUWorkloadSpec, RetryPolicy
from kgwe.policy.workload_resolution import gang_phrase
from kgwe.runtime import conditions
from kgwe.runtime.conditions import ConditionStatus, is_true
from kgwe.vocab import GPU_INDEX_ANNOTATION

CONDITION_TYPES = ("Admitted", "PodsScheduled", "PodsReady", "Complete", "Failed", "Suspended")
GPUS_HEALTHY = "GPUsHealthy"  # set only while a pod of the run is placed
KUEUE_ADMITTED = "KueueAdmitted"  # set only through Kueue: what Kueue says of the run's Workload


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


def _disrupted(pod: Mapping[str, Any]) -> bool:
    """Evicted, preempted (Kueue's too) or deleted: not the job's fault, as a Job's podFailurePolicy says."""
    return is_true(conditions.of(pod), "DisruptionTarget")


def member_failure(view: RunView, kueue: bool) -> str | None:
    """What failed in the run, said for people: a failed Job, or (through Kueue, where KGWE makes the pods)
    a pod that failed on its own; None when nothing did."""
    if not kueue:
        job = failed_job(view)
        if job is None:
            return None
        why = (conditions.find(conditions.of(job), "Failed") or {}).get("reason") or ""
        return f"Job {job['metadata']['name']} failed ({why})"
    for pod in sorted(view.pods, key=lambda p: p["metadata"]["name"]):
        status = pod.get("status") or {}
        if status.get("phase") == "Failed" and not _disrupted(pod):
            why = status.get("reason") or status.get("message") or ""
            return f"Pod {pod['metadata']['name']} failed ({why})"
    return None


def run_complete(view: RunView, wl: GPUWorkload, kueue: bool) -> bool:
    """Every member finished well: each role's Job, or (through Kueue) each pod."""
    if not kueue:
        return all_complete(view, len(wl.spec.effective_roles()))
    succeeded = {
        p["metadata"]["name"] for p in view.pods if (p.get("status") or {}).get("phase") == "Succeeded"
    }
    return len(succeeded) == wl.spec.total_pods


def kueue_replacements(view: RunView, planned: Sequence[str]) -> tuple[list[str], bool]:
    """Through Kueue, whose preemption deletes a group's pods and leaves replacing them to their maker:
    (pods to delete first — failed by a disruption, so a new pod of the name can follow —, whether any
    planned pod is missing and must be created again)."""
    present = {p["metadata"]["name"]: p for p in view.pods}
    disrupted = sorted(
        name
        for name, p in present.items()
        if (p.get("status") or {}).get("phase") == "Failed"
        and _disrupted(p)
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    )
    return disrupted, any(name not in present for name in planned)


def kueue_admission(
    workload: Mapping[str, Any] | None, group: str, pods: int
) -> tuple[ConditionStatus, str, str]:
    """Condition KueueAdmitted (status, reason, message) from the run's Kueue Workload (named after its pod
    group); Kueue's own reason and message while it holds the pods."""
    if workload is None:
        return (
            "False",
            "Pending",
            f"Kueue has no Workload {group} yet (it makes one once all {pods} pods exist)",
        )
    held = conditions.of(workload)
    admission = (workload.get("status") or {}).get("admission") or {}
    queue = (workload.get("spec") or {}).get("queueName") or "no LocalQueue"

    def said(ctype: str, default: str) -> tuple[str, str]:
        c = conditions.find(held, ctype) or {}
        return str(c.get("reason") or default), str(c.get("message") or "")[:1024]

    if is_true(held, "Finished"):
        return ("True", *said("Finished", "Finished"))
    if is_true(held, "Admitted"):
        cq = admission.get("clusterQueue") or "?"
        return "True", "Admitted", f"Kueue admitted Workload {group} in ClusterQueue {cq} ({queue})"
    if is_true(held, "Evicted"):
        reason, message = said("Evicted", "Evicted")
        return "False", reason if reason.startswith("Evicted") else f"Evicted{reason}", message
    reason, message = said("QuotaReserved", "Pending")
    return "False", reason, f"Kueue holds Workload {group} ({queue}): {message or 'queued, not admitted yet'}"


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
    """pod -> node -> GPU indices from the pod's kgwe.nvidia.io/gpu-index annotation, when written (else
    none yet: `with_held_gpus` takes them from the node agent's record of the kubelet's allocation)."""
    out = []
    for p in sorted(live_pods(view), key=lambda p: p["metadata"]["name"]):
        node = (p.get("spec") or {}).get("nodeName")
        if not node:
            continue
        raw = ((p.get("metadata") or {}).get("annotations") or {}).get(GPU_INDEX_ANNOTATION) or ""
        gpus = [int(x) for x in raw.split(",") if x.strip().isdigit()]
        out.append({"pod": p["metadata"]["name"], "node": node, "gpus": gpus})
    return out


def with_held_gpus(
    placements: Sequence[Mapping[str, Any]],
    namespace: str,
    node_holders: Mapping[str, Mapping[int, str]],
) -> list[dict[str, Any]]:
    """`placements` with each pod's GPUs: its kgwe.nvidia.io/gpu-index annotation, else what the node's
    kgwe.nvidia.io/gpu-pods annotation (the agent's reading of the kubelet's PodResources API: the GPUs the
    device plugin allocated) says it holds; none while neither says."""
    out = []
    for placed in placements:
        gpus = list(placed.get("gpus") or [])
        if not gpus:
            holders = node_holders.get(placed["node"]) or {}
            gpus = sorted(i for i, who in holders.items() if who == f"{namespace}/{placed['pod']}")
        out.append({**placed, "gpus": gpus})
    return out


def unhealthy_placements(
    placements: Sequence[Mapping[str, Any]], node_faults: Mapping[str, Mapping[int, str]]
) -> list[str]:
    """ "pod on node GPU i (reason)" for every pod of the run that holds a GPU the agent reports unhealthy
    (`placements` as `with_held_gpus` gives them: a pod whose GPUs are not known is not claimed)."""
    out = []
    for placed in placements:
        node, pod = placed["node"], placed["pod"]
        sick = node_faults.get(node) or {}
        out += [f"{pod} on {node} GPU {i} ({sick[i]})" for i in placed.get("gpus") or [] if i in sick]
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


def gang_words(status: Mapping[str, Any], spec: GPUWorkloadSpec) -> str:
    """The run's gang engine as the status records it, in words for messages (never a bare "None")."""
    return gang_phrase(str(status.get("gangBackend") or "None"), spec.total_pods, spec.is_batch)
