"""Node operations of the MIG rollout: relabel, cordon/uncordon, evict GPU pods (Eviction API, so
PodDisruptionBudgets are respected), plus reading GPU pods per node.

Each operation is one small merge patch under KGWE's field manager (on the cluster interface,
kgwe.runtime.cluster); KGWE never rewrites whole Node objects, so labels and taints owned by the GPU
Operator, kubelet or admins stay intact.
Each patch also sets `stamp` (the policy commit that caused it and its author, kgwe.audit.stamp), and each
write is listed in `changes` for the audit log.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.audit.log import NodeChange
from kgwe.cluster.client import list_items
from kgwe.quantity import count
from kgwe.runtime.cluster import Cluster
from kgwe.runtime.errors import TOO_MANY_REQUESTS, is_not_found, status_of
from kgwe.runtime.kinds import NODE, POD
from kgwe.runtime.leader import Gate, check
from kgwe.timestamps import format_rfc3339 as format_time
from kgwe.vocab import (
    ACKNOWLEDGED_ANNOTATION,
    CORDONED_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    REQUESTED_AT_ANNOTATION,
    RETRY_ANNOTATION,
    ROLLOUT_REVISION_ANNOTATION,
    is_gpu_resource,
)


@dataclass(frozen=True)
class EvictionOutcome:
    evicted: tuple[str, ...]  # "namespace/name"
    blocked: tuple[str, ...]  # refused (429: a PodDisruptionBudget does not allow it now)


def pod_gpu_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """GPU-like extended resources a pod (a dict as the API returns it) holds: requests, else limits,
    summed over containers."""
    totals: dict[str, int] = defaultdict(int)
    spec = pod.get("spec") or {}
    for container in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        res = container.get("resources") or {}
        wanted = dict(res.get("limits") or {})
        wanted.update(res.get("requests") or {})
        for key, value in wanted.items():
            if is_gpu_resource(key):
                totals[key] += count(value)
    return dict(totals)


def holds_gpu(pod: Mapping[str, Any]) -> bool:
    """A pod that is (or may soon be) running on its node and holds GPU resources."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return False
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    return any(v > 0 for v in pod_gpu_requests(pod).values())


LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"  # the field selector of pods not finished


def live_pods(core: client.CoreV1Api) -> list[dict[str, Any]]:
    """Every pod not yet finished, cluster-wide, as plain dicts."""
    return list_items(core.list_pod_for_all_namespaces, field_selector=LIVE_PODS)


def gpu_pods_by_node(
    core: client.CoreV1Api, pods: list[dict[str, Any]] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """node -> the pods holding GPUs on it (`pods`: a list already read, else read now)."""
    return gpu_pods_on_nodes(live_pods(core) if pods is None else pods)


def gpu_pods_on_nodes(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """node -> the pods of `pods` holding GPUs on it."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in pods:
        if holds_gpu(pod):
            out[pod["spec"]["nodeName"]].append(pod)
    return dict(out)


class NodeOps:
    """`guard` (the leader gate) is asked before every write; NotLeader stops the rollout at once."""

    label = MIG_CONFIG_LABEL  # the label `relabel` sets

    def __init__(
        self,
        cluster: Cluster,
        *,
        guard: Gate | None = None,
        on_write: Callable[[str, str], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.guard = guard
        self.on_write = on_write  # told (node, resourceVersion) after each patch, e.g. NodeCache.expect
        self.writes = 0
        self.stamp: Mapping[str, str] = {}  # annotations every patched Node gets (the pass's commit)
        self._changes: list[NodeChange] = []
        self._lock = threading.Lock()

    def _count(self, change: NodeChange | None = None) -> None:
        with self._lock:
            self.writes += 1
            if change is not None:
                self._changes.append(change)

    def changes(self) -> list[NodeChange]:
        """The Node writes made since the last call, in order."""
        with self._lock:
            taken, self._changes = self._changes, []
        return taken

    def _patch(self, name: str, body: dict[str, Any], change: NodeChange | None = None) -> None:
        check(self.guard, "the rollout's next write")
        if self.stamp:
            meta = body.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **self.stamp}
        # the new resourceVersion tells a node cache when it shows this write
        version = (self.cluster.patch(NODE, name, body).get("metadata") or {}).get("resourceVersion")
        self._count(change)
        if version and self.on_write is not None:
            self.on_write(name, version)

    def relabel(
        self, name: str, config: str, now: datetime | None = None, revision: str | None = None
    ) -> None:
        """Select `config` for the MIG manager and drop the previous state, in one patch, so a stale
        `success` can never be mistaken for the new config's. A new attempt starts with no acknowledgement;
        `revision` records which rollout of the pool the change belongs to."""
        self._patch(
            name,
            {
                "metadata": {
                    "labels": {MIG_CONFIG_LABEL: config, MIG_STATE_LABEL: None},
                    "annotations": {
                        REQUESTED_AT_ANNOTATION: format_time(now or datetime.now(UTC)),
                        ROLLOUT_REVISION_ANNOTATION: revision,
                        RETRY_ANNOTATION: None,
                        ACKNOWLEDGED_ANNOTATION: None,
                    },
                }
            },
            NodeChange(name, "relabel", self.label, config),
        )

    def acknowledge(self, name: str) -> None:
        """Take a person's RETRY_ANNOTATION: if the node's MIG change failed (or is stuck), record which
        attempt (its requested-at stamp) the acknowledgement covers; remove the request either way."""
        meta = (self.cluster.get(NODE, name) or {}).get("metadata") or {}
        annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
        if RETRY_ANNOTATION not in annotations:
            return
        body: dict[str, Any] = {RETRY_ANNOTATION: None}
        if labels.get(MIG_STATE_LABEL) != "success":
            body[ACKNOWLEDGED_ANNOTATION] = attempt_stamp(annotations)
        # resourceVersion: a relabel in between starts a new attempt the acknowledgement must not cover
        self._patch(
            name,
            {"metadata": {"annotations": body, "resourceVersion": meta.get("resourceVersion")}},
            NodeChange(name, "acknowledge"),
        )

    def cordon(self, name: str, config: str) -> None:
        self._patch(
            name,
            {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_ANNOTATION: config}}},
            NodeChange(name, "cordon"),
        )

    def uncordon(self, name: str) -> None:
        """Undo KGWE's own cordon only (the annotation says it was ours)."""
        meta = (self.cluster.get(NODE, name) or {}).get("metadata") or {}
        if CORDONED_ANNOTATION not in (meta.get("annotations") or {}):
            return
        self._patch(
            name,
            {"spec": {"unschedulable": None}, "metadata": {"annotations": {CORDONED_ANNOTATION: None}}},
            NodeChange(name, "uncordon"),
        )

    def remove(self, name: str, labels: Sequence[str] = (), annotations: Sequence[str] = ()) -> None:
        """Remove these labels and annotations of KGWE's from the node (offboarding), in one patch."""
        body = {"labels": dict.fromkeys(labels), "annotations": dict.fromkeys(annotations)}
        self._patch(name, {"metadata": {k: v for k, v in body.items() if v}}, NodeChange(name, "release"))

    def evict_gpu_pods(self, name: str) -> EvictionOutcome:
        pods = self.cluster.list(POD, fields=f"spec.nodeName={name}")
        evicted, blocked = [], []
        for pod in pods:
            meta = pod.get("metadata") or {}
            if not holds_gpu(pod) or meta.get("deletionTimestamp"):
                continue
            pod_name, pod_ns = meta["name"], meta["namespace"]
            key = f"{pod_ns}/{pod_name}"
            check(self.guard, "the rollout's next write")
            try:
                self.cluster.evict(pod_name, pod_ns)
                self._count(NodeChange(name, "evict", value=key))
                evicted.append(key)
            except ApiException as exc:
                if status_of(exc) == TOO_MANY_REQUESTS:  # a PodDisruptionBudget does not allow it now
                    blocked.append(key)
                elif not is_not_found(exc):
                    raise
        return EvictionOutcome(tuple(evicted), tuple(blocked))


def attempt_stamp(annotations: Mapping[str, str]) -> str:
    """Names a node's current MIG change attempt: when KGWE selected its config ("unknown" if not KGWE)."""
    return annotations.get(REQUESTED_AT_ANNOTATION) or "unknown"
