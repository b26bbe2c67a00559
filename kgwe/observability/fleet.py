"""Pure fleet statistics for the GPU fleet dashboard and the unhealthy-GPU and MIG-failed alerts.

Input: GPU Node and Pod dicts as the API returns them (`kgwe.cluster.inventory.facts_from_objects`'s
input) plus node -> pool from the last applied policy. Output: labelled samples with bounded labels only
(pool, product, MIG profile, node, state) — never a pod name or UID.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgwe.cluster.nodes import pod_gpu_requests
from kgwe.errors import KgweError
from kgwe.quantity import count
from kgwe.topology.health import decode
from kgwe.vocab import (
    GPU_COUNT_LABEL,
    GPU_HEALTH_ANNOTATION,
    GPU_PRODUCT_LABEL,
    GPU_REPLICAS_LABEL,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    MIG_STATE_LABEL,
    SHARED_GPU_RESOURCE,
)

NO_POOL = ""  # a GPU node no MIGStrategy selects
MIG_STATES = ("pending", "rebooting", "success", "failed")


@dataclass
class FleetStats:
    """Keys are label tuples in the order the metric names them."""

    gpus: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))  # pool, product
    gpus_allocated: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    gpus_unhealthy: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    mig_instances: dict[tuple[str, str, str], int] = field(  # pool, profile, used|free
        default_factory=lambda: defaultdict(int)
    )
    shared_replicas: dict[tuple[str, str], int] = field(  # pool, used|free
        default_factory=lambda: defaultdict(int)
    )
    mig_nodes: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))  # pool, state
    mig_failed_nodes: list[tuple[str, str]] = field(default_factory=list)  # node, pool
    bad_health_annotations: int = 0  # nodes whose gpu-health annotation does not decode


def _int(value: object) -> int:
    return count(value)


def _requests(pods: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for pod in pods:
        for resource, n in pod_gpu_requests(pod).items():
            totals[resource] += n
    return totals


def fleet_stats(
    nodes: Sequence[Mapping[str, Any]],
    gpu_pods: Mapping[str, Sequence[Mapping[str, Any]]],
    node_pool: Mapping[str, str],
) -> FleetStats:
    """What the fleet holds and uses, per pool. `gpu_pods`: node name -> the non-terminal pods bound to it
    that hold GPU resources."""
    out = FleetStats()
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        labels = meta.get("labels") or {}
        pool = node_pool.get(name, NO_POOL)
        product = str(labels.get(GPU_PRODUCT_LABEL, ""))
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        used = _requests(gpu_pods.get(name, ()))
        gpus = _int(labels.get(GPU_COUNT_LABEL, 0))
        replicas = _int(labels.get(GPU_REPLICAS_LABEL, 1)) or 1
        out.gpus[(pool, product)] += gpus
        if replicas > 1:  # time-sliced or MPS: the device plugin advertises gpus x replicas
            resource = SHARED_GPU_RESOURCE if SHARED_GPU_RESOURCE in allocatable else GPU_RESOURCE
            total, held = _int(allocatable.get(resource, 0)), used.get(resource, 0)
            out.shared_replicas[(pool, "used")] += min(held, total)
            out.shared_replicas[(pool, "free")] += max(0, total - held)
            out.gpus_allocated[(pool, product)] += min(gpus, -(-held // replicas))
        else:
            out.gpus_allocated[(pool, product)] += min(gpus, used.get(GPU_RESOURCE, 0))
        for resource, value in allocatable.items():
            if resource.startswith(MIG_RESOURCE_PREFIX):
                profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
                total, held = _int(value), used.get(resource, 0)
                out.mig_instances[(pool, profile, "used")] += min(held, total)
                out.mig_instances[(pool, profile, "free")] += max(0, total - held)
        state = labels.get(MIG_STATE_LABEL)
        if state in MIG_STATES:
            out.mig_nodes[(pool, state)] += 1
            if state == "failed":
                out.mig_failed_nodes.append((name, pool))
        try:
            faults = decode((meta.get("annotations") or {}).get(GPU_HEALTH_ANNOTATION))
        except KgweError:
            out.bad_health_annotations += 1
            continue
        out.gpus_unhealthy[(pool, product)] += len(faults)
    return out
