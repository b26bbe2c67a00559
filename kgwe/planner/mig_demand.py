"""What a MIG pool's pods hold and ask for: the measurement demand-driven rebalancing decides on.

Pure: pods and nodes as plain dicts/data in, `Measurement`s per pool out. A pod asks a pool for MIG
instances when it is unschedulable (the scheduler tried and found no node), requests `nvidia.com/mig-*`
resources, and its nodeSelector matches a node of the pool whose GPU model offers the profile. A pod
several pools could serve is counted once, for the first of them by name (pools rarely overlap in what
they offer; counting it twice would repartition two pools for one pod).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kgwe.extender.request import RequestError, parse_pod
from kgwe.planner.rebalance import Measurement
from kgwe.runtime.conditions import find

UNSCHEDULABLE = "Unschedulable"  # PodScheduled=False reason the scheduler sets when no node fits


@dataclass(frozen=True)
class PoolView:
    """One pool as the measurement sees it: its nodes' labels and the MIG profiles its GPUs offer."""

    name: str
    nodes: tuple[str, ...]
    node_labels: tuple[Mapping[str, str], ...]
    profiles: frozenset[str]
    held: Mapping[str, int]  # profile -> instances pods hold on the pool's GPUs


def unschedulable_mig_request(pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The (profile, instances) an unschedulable pending pod asks for; () for any other pod."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if spec.get("nodeName") or status.get("phase") != "Pending":
        return ()
    scheduled = find(status.get("conditions"), "PodScheduled") or {}
    if not (scheduled.get("status") == "False" and scheduled.get("reason") == UNSCHEDULABLE):
        return ()
    try:
        return parse_pod(pod).mig
    except (RequestError, ValueError, TypeError):
        return ()  # a pod the extender cannot read is no demand KGWE could serve


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pool_for(pod: Mapping[str, Any], wanted: Iterable[str], pools: Sequence[PoolView]) -> str | None:
    """The first pool (by name) with a node the pod's nodeSelector admits whose GPUs offer every profile."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        return None
    profiles = set(wanted)
    for pool in sorted(pools, key=lambda p: p.name):
        if profiles <= pool.profiles and any(_selects(selector, labels) for labels in pool.node_labels):
            return pool.name
    return None


def measure(
    pools: Sequence[PoolView],
    pods: Iterable[Mapping[str, Any]],
    reclaimable: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, Measurement]:
    """Per pool: pending instances (and pods) of unschedulable pods, instances held, and the held ones
    whose pods stayed idle (`reclaimable`: pool -> profile -> instances, from a utilization source)."""
    pending: dict[str, Counter[str]] = {p.name: Counter() for p in pools}
    pending_pods: dict[str, Counter[str]] = {p.name: Counter() for p in pools}
    for pod in pods:
        request = unschedulable_mig_request(pod)
        if not request:
            continue
        pool = pool_for(pod, (name for name, _ in request), pools)
        if pool is None:
            continue
        for profile, count in request:
            pending[pool][profile] += count
            pending_pods[pool][profile] += 1
    idle = reclaimable or {}
    return {
        p.name: Measurement(
            pending=dict(pending[p.name]),
            in_use=dict(p.held),
            reclaimable=dict(idle.get(p.name, {})),
            pending_pods=dict(pending_pods[p.name]),
        )
        for p in pools
    }
