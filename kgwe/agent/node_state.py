"""What the agent wants on its Node (labels, annotations, the GPUHealthy condition, its taint), and the
minimal patch to get there. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from kgwe.runtime.conditions import ConditionStatus, dump, parse, set_condition
from kgwe.timestamps import format_rfc3339
from kgwe.topology import annotation, choice, known
from kgwe.topology.health import GPUFault
from kgwe.topology.model import NodeTopology
from kgwe.vocab import ANNOTATION_PREFIX, GPU_HEALTH_CONDITION, GPU_PODS_ANNOTATION, GPU_UNHEALTHY_TAINT

PREFIX = ANNOTATION_PREFIX


def desired_labels(topo: NodeTopology) -> dict[str, str | None]:
    """Labels for node selection; None removes a label that no longer applies."""
    n = topo.size
    all_gpus = frozenset(g.index for g in topo.gpus)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    return {
        PREFIX + "topology": known.identify(topo),
        PREFIX + "gpu-count": str(n),
        PREFIX + "nvlink": str(any(topo.has_nvlink(i, j) for i, j in pairs)).lower(),
        PREFIX + "nvswitch": str(any(g.nvswitch_links for g in topo.gpus)).lower(),
        PREFIX + "numa-nodes": str(len({g.numa_node for g in topo.gpus if g.numa_node is not None})),
        PREFIX + "ring-gbps": str(int(choice.ring_bottleneck_gbps(topo, all_gpus))) if n >= 2 else None,
    }


def desired_annotations(topo: NodeTopology, holders: Mapping[int, str] | None) -> dict[str, str]:
    """The topology annotation, plus GPU index -> "namespace/pod" when the kubelet told us."""
    out = {annotation.ANNOTATION_KEY: annotation.encode(topo)}
    if holders is not None:
        out[GPU_PODS_ANNOTATION] = orjson.dumps(
            {str(k): v for k, v in sorted(holders.items())}, option=orjson.OPT_SORT_KEYS
        ).decode()
    return out


def node_patch(
    current_labels: Mapping[str, str] | None,
    current_annotations: Mapping[str, str] | None,
    labels: Mapping[str, str | None],
    annotations: Mapping[str, str | None],
) -> dict[str, Any] | None:
    """A strategic-merge patch body with only what differs, or None when the Node is already right."""
    cur_l, cur_a = dict(current_labels or {}), dict(current_annotations or {})
    label_diff = {k: v for k, v in labels.items() if cur_l.get(k) != v and not (v is None and k not in cur_l)}
    ann_diff = {
        k: v for k, v in annotations.items() if cur_a.get(k) != v and not (v is None and k not in cur_a)
    }
    if not label_diff and not ann_diff:
        return None
    meta: dict[str, Any] = {}
    if label_diff:
        meta["labels"] = label_diff
    if ann_diff:
        meta["annotations"] = ann_diff
    return {"metadata": meta}


def health_condition(faults: Mapping[int, GPUFault]) -> tuple[ConditionStatus, str, str]:
    """(status, reason, message) of the Node's GPUHealthy condition for these faults."""
    if not faults:
        return "True", "AllGPUsHealthy", "every GPU passes the agent's NVML health checks"
    parts = [f"GPU {i}: {f.reason} since {format_rfc3339(f.since)}" for i, f in faults.items()]
    return "False", "GPUsUnhealthy", "; ".join(parts)[:1024]


NVML_UNAVAILABLE = "NVMLUnavailable"


def unavailable_condition(error: str) -> tuple[ConditionStatus, str, str]:
    """(status, reason, message) of GPUHealthy while the agent cannot use NVML at all: Unknown, with what
    to check."""
    return (
        "Unknown",
        NVML_UNAVAILABLE,
        f"{error}. The agent cannot load NVIDIA's libnvidia-ml.so.1 on this node: check the GPU driver (the "
        "GPU Operator's driver root) and that the agent's pods run with the runtime class that gives "
        "containers NVML (the chart's agent.runtimeClassName)"[:1024],
    )


def condition_patch(
    current: tuple[str | None, str | None, str | None, datetime | None] | None,
    faults: Mapping[int, GPUFault] | tuple[ConditionStatus, str, str],
    now: datetime,
) -> dict[str, Any] | None:
    """A Node status patch setting GPUHealthy (conditions merge by type), or None when it already says so.

    `faults` are the GPUs' faults, or an explicit (status, reason, message) such as unavailable_condition.
    `current` is (status, reason, message, lastTransitionTime) of the existing condition, if any; the
    transition time moves only when the status flips (kgwe.runtime.conditions)."""
    status, reason, message = faults if isinstance(faults, tuple) else health_condition(faults)
    held = []
    if current is not None:
        old_status, old_reason, old_message, since = current
        held = parse(
            [
                {
                    "type": GPU_HEALTH_CONDITION,
                    "status": old_status,
                    "reason": old_reason,
                    "message": old_message,
                    "lastTransitionTime": format_rfc3339(since) if since is not None else None,
                }
            ]
        )
    if not set_condition(held, GPU_HEALTH_CONDITION, status, reason, message, generation=None, now=now):
        return None
    (condition,) = dump(held)
    condition["lastHeartbeatTime"] = format_rfc3339(now)  # a Node condition's own field
    return {"status": {"conditions": [condition]}}


def desired_taints(current: Sequence[Mapping[str, Any]], tainted: bool) -> list[dict[str, Any]] | None:
    """The Node's full taint list with KGWE's gpu-unhealthy taint added or removed; None when unchanged.

    Taints have no merge key, so the patch must carry the whole list (other owners' taints kept)."""
    others = [
        {k: v for k, v in t.items() if v is not None and k in ("key", "value", "effect", "time_added")}
        for t in current
        if t.get("key") != GPU_UNHEALTHY_TAINT
    ]
    have = any(t.get("key") == GPU_UNHEALTHY_TAINT for t in current)
    if have == tainted:
        return None
    out = [{"timeAdded" if k == "time_added" else k: v for k, v in t.items()} for t in others]
    if tainted:
        out.append({"key": GPU_UNHEALTHY_TAINT, "value": "true", "effect": "NoSchedule"})
    return out
