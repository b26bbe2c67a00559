"""Metering: pod and node observations -> usage interval actions. Pure: no API calls, no clock.

A pod holds GPUs while it is bound to a node and not finished. The resources it holds are
`nvidia.com/gpu` (whole GPUs), `nvidia.com/mig-<profile>` (MIG instances) and `nvidia.com/gpu.shared`
with the `kgwe.nvidia.io/gpu-milli` annotation (a share of a GPU). What a pod says about itself never
lowers its charge below what it holds: whole GPUs and MIG instances are charged whatever its annotations
say, and the annotation only sizes a share of `nvidia.com/gpu.shared` (absent or unreadable, the share is
the one the extender places it with, 1000 / units thousandths per unit). The watch loop turns each pod
event into Start/End actions; on (re)start it reconciles the store's open intervals with the live pod
list, so nothing is counted twice (a holding already open stays open) and nothing is lost (an open
interval whose pod vanished while we were down is closed; a live holding we never saw is opened).
Pods whose resources we cannot read (not whole numbers) are skipped with a logged reason, never guessed.

Who pays is decided by the pod's namespace, never by the pod itself (whoever can create a pod could
otherwise bill another team): the team of the GPUBudget that claims the namespace, else the namespace's
label `kgwe.nvidia.io/team` (a bounded, label-shaped value), else UNASSIGNED_TEAM — one line for every
namespace nobody claimed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kgwe.cost.tables import resource_key
from kgwe.cost.usage import MIG, SHARED, WHOLE, NodeCapacity, UsageInterval, ensure_utc
from kgwe.gpu.sharing import annotated_milli, node_sharing, replica_milli
from kgwe.quantity import whole
from kgwe.timestamps import parse_rfc3339
from kgwe.vocab import (
    GPU_COUNT_LABEL,
    GPU_MILLI_ANNOTATION,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    SHARED_GPU_RESOURCE,
    TEAM_LABEL,
)

if TYPE_CHECKING:  # the database layer is loaded only where metering writes
    from kgwe.cost.store import CostStore

log = logging.getLogger(__name__)

GPU = GPU_RESOURCE
GPU_SHARED = SHARED_GPU_RESOURCE
MIG_PREFIX = MIG_RESOURCE_PREFIX
MILLI_ANNOTATION = GPU_MILLI_ANNOTATION
UNASSIGNED_TEAM = "__unassigned__"
_TEAM_VALUE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Start:
    interval: UsageInterval


@dataclass(frozen=True)
class End:
    pod_uid: str
    resource: str
    at: datetime


@dataclass(frozen=True)
class Skip:
    pod: str
    reason: str


Action = Start | End | Skip


@dataclass(frozen=True)
class NodeInfo:
    node: str
    gpu_product: str
    gpu_count: int
    spot: bool
    replicas: int = 1  # device-plugin replicas per GPU (time-slicing / MPS); a replica is 1/replicas


@dataclass(frozen=True)
class Holding:
    kind: str
    count: int
    mig_profile: str | None = None
    gpu_milli: int | None = None

    @property
    def resource(self) -> str:
        return resource_key(self.kind, self.mig_profile, self.gpu_milli)


# Any: a field of a pod or node as the API gives it (JSON of any shape); the callers read it as they need
def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:  # Any: a pod or node field as the API gives it
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _quantity(value: object) -> int | None:
    """Extended resources are whole numbers (in any quantity spelling); anything else is not a GPU count we
    can trust."""
    if value is None:
        return None
    try:
        return whole(value)
    except ValueError:
        return None


def _parse_time(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return ensure_utc(value)
    return parse_rfc3339(value)


def pod_name(pod: Mapping[str, Any]) -> str:
    return f"{_get(pod, 'metadata', 'namespace')}/{_get(pod, 'metadata', 'name')}"


def holdings(pod: Mapping[str, Any], replicas: int = 1) -> tuple[list[Holding], str | None]:
    """The GPU resources a pod holds, or a reason to skip it. Effective request as the scheduler sees it:
    max(largest init container, sum of app containers) per resource; limits win over requests.

    On a node whose GPUs the device plugin replicates (`replicas` > 1) each unit of `nvidia.com/gpu` or
    `nvidia.com/gpu.shared` is one replica: a share of `replica_milli(replicas)` of a GPU (at least, with
    the gpu-milli annotation), priced as that share — as the extender packs it."""

    def totals(
        containers: Iterable[Mapping[str, Any]] | None, combine: Callable[[int, int], int]
    ) -> tuple[dict[str, int], str | None]:
        out: dict[str, int] = {}
        for c in containers or ():
            res = _get(c, "resources") or {}
            merged = {**(res.get("requests") or {}), **(res.get("limits") or {})}
            for name, value in merged.items():
                if name in (GPU, GPU_SHARED) or name.startswith(MIG_PREFIX):
                    qty = _quantity(value)
                    if qty is None:
                        return {}, f"{name}={value!r} is not a whole number"
                    out[name] = combine(out.get(name, 0), qty)
        return out, None

    spec = _get(pod, "spec") or {}
    app, err = totals(spec.get("containers"), lambda a, b: a + b)
    init, err2 = totals(spec.get("initContainers"), max)
    if err or err2:
        return [], err or err2
    want = {k: max(app.get(k, 0), init.get(k, 0)) for k in set(app) | set(init)}
    want = {k: v for k, v in want.items() if v > 0}
    milli = _declared_share(pod, want.get(GPU_SHARED, 0))
    out: list[Holding] = []
    for name, qty in sorted(want.items()):
        if replicas > 1 and name in (GPU, GPU_SHARED):
            share = (
                max(replica_milli(replicas), milli or 0) if name == GPU_SHARED else replica_milli(replicas)
            )
            out.append(Holding(SHARED, qty, gpu_milli=share))
        elif name == GPU:
            out.append(Holding(WHOLE, qty))
        elif name == GPU_SHARED:
            out.append(Holding(SHARED, qty, gpu_milli=milli or max(1, 1000 // qty)))
        else:
            out.append(Holding(MIG, qty, mig_profile=name[len(MIG_PREFIX) :]))
    return out, None


def _declared_share(pod: Mapping[str, Any], shared_units: int) -> int | None:
    """The share the gpu-milli annotation gives a pod holding `shared_units` of nvidia.com/gpu.shared; None
    when it holds none (the annotation then sizes nothing) or the annotation is absent or not 1..1000 (the
    extender's default share applies, as it placed the pod)."""
    raw = (_get(pod, "metadata", "annotations") or {}).get(MILLI_ANNOTATION)
    return annotated_milli(raw) if raw is not None and shared_units else None


def namespace_teams(
    namespaces: Iterable[Mapping[str, Any]], budget_teams: Mapping[str, str] | None = None
) -> dict[str, str]:
    """namespace -> team: the claiming GPUBudget's team, else a well-formed `kgwe.nvidia.io/team` label
    (lower-case, at most 63 characters, label-shaped); namespaces with neither are left out."""
    teams: dict[str, str] = {}
    for ns in namespaces:
        name = _get(ns, "metadata", "name")
        value = (_get(ns, "metadata", "labels") or {}).get(TEAM_LABEL)
        if isinstance(name, str) and isinstance(value, str) and _TEAM_VALUE.match(value):
            teams[name] = value
    teams.update(budget_teams or {})
    return teams


def is_holding(pod: Mapping[str, Any]) -> bool:
    """Bound to a node and not finished: the device plugin has given it its devices."""
    return bool(_get(pod, "spec", "nodeName")) and _get(pod, "status", "phase") not in FINISHED


def finished_at(pod: Mapping[str, Any]) -> datetime | None:
    """When a finished pod released its GPUs: the last container termination time."""
    times = [
        _parse_time(_get(cs, "state", "terminated", "finishedAt"))
        for cs in (_get(pod, "status", "containerStatuses") or [])
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else None


class Meter:
    """Turns observations into actions. `nodes` maps node name -> NodeInfo (kept up to date by the caller)."""

    def __init__(
        self, nodes: Mapping[str, NodeInfo] | None = None, teams: Mapping[str, str] | None = None
    ) -> None:
        self.nodes: dict[str, NodeInfo] = dict(nodes or {})
        self.teams: dict[str, str] = dict(teams or {})  # namespace -> team (namespace_teams)

    def team_for(self, namespace: str) -> str:
        return self.teams.get(namespace, UNASSIGNED_TEAM)

    def _replicas(self, pod: Mapping[str, Any]) -> int:
        info = self.nodes.get(_get(pod, "spec", "nodeName"))
        return info.replicas if info is not None else 1

    def _intervals(self, pod: Mapping[str, Any], at: datetime) -> tuple[list[UsageInterval], Skip | None]:
        held, reason = holdings(pod, self._replicas(pod))
        if reason:
            return [], Skip(pod_name(pod), reason)
        if not held:
            return [], None
        node = _get(pod, "spec", "nodeName")
        info = self.nodes.get(node)
        if info is None:
            reason = f"node {node!r} is not a known GPU node (no {GPU_PRODUCT_LABEL} label)"
            return [], Skip(pod_name(pod), reason)
        start = _parse_time(_get(pod, "status", "startTime")) or at
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or pod_name(pod)
        return [
            UsageInterval(
                pod=meta.get("name", ""),
                namespace=meta.get("namespace", ""),
                team=self.team_for(meta.get("namespace", "")),
                node=node,
                gpu_product=info.gpu_product,
                kind=h.kind,
                count=h.count,
                start=min(start, at),
                mig_profile=h.mig_profile,
                gpu_milli=h.gpu_milli,
                spot=info.spot,
                pod_uid=uid,
            )
            for h in held
        ], None

    def observe(self, event_type: str, pod: Mapping[str, Any], at: datetime) -> list[Action]:
        """One watch event (ADDED/MODIFIED/DELETED) at time `at`."""
        at = ensure_utc(at)
        uid = _get(pod, "metadata", "uid") or pod_name(pod)
        if event_type == "DELETED" or not is_holding(pod):
            held, _ = holdings(pod, self._replicas(pod))
            if not held or not _get(pod, "spec", "nodeName"):
                return []
            end = finished_at(pod) if event_type != "DELETED" or not is_holding(pod) else None
            return [End(uid, h.resource, min(end or at, at)) for h in held]
        intervals, skip = self._intervals(pod, at)
        if skip:
            log.warning("metering: skipping pod %s: %s", skip.pod, skip.reason)
            return [skip]
        return [Start(iv) for iv in intervals]

    def reconcile(
        self,
        open_intervals: Iterable[UsageInterval],
        live_pods: Iterable[Mapping[str, Any]],
        at: datetime,
        seen_pods: Collection[str] | None = None,
    ) -> list[Action]:
        """On start or after a watch gap: open what is held but not recorded, close what is recorded
        but no longer held. Holdings already open are left alone (never a second interval). With
        `seen_pods` (the pod uids the store holds any interval of), a finished pod still listed that the
        store never saw — it started and ended while no leader could record it, e.g. its writes were in the
        spool of a replica an upgrade replaced — is recorded, closed, with its real times."""
        at = ensure_utc(at)
        recorded = {(iv.pod_uid, _resource(iv)) for iv in open_intervals}
        live: set[tuple[str, str]] = set()
        actions: list[Action] = []
        finished: dict[str, datetime | None] = {}
        for pod in live_pods:
            uid = _get(pod, "metadata", "uid") or pod_name(pod)
            if not is_holding(pod):
                finished[uid] = finished_at(pod)
                if seen_pods is not None and uid not in seen_pods:
                    actions += self._missed(pod, uid, finished[uid], at)
                continue
            intervals, skip = self._intervals(pod, at)
            if skip:
                log.warning("metering: skipping pod %s: %s", skip.pod, skip.reason)
                actions.append(skip)
            for iv in intervals:
                key = (iv.pod_uid, _resource(iv))
                live.add(key)
                if key not in recorded:
                    actions.append(Start(iv))
        for uid, resource in sorted(recorded - live):
            actions.append(End(uid, resource, min(finished.get(uid) or at, at)))
        return actions

    def _missed(self, pod: Mapping[str, Any], uid: str, end: datetime | None, at: datetime) -> list[Action]:
        """The closed intervals of a finished pod no one recorded (none when it never ran on a node)."""
        if not _get(pod, "spec", "nodeName") or end is None or not _get(pod, "status", "startTime"):
            return []
        intervals, skip = self._intervals(pod, at)
        if skip:
            log.warning("metering: skipping finished pod %s: %s", skip.pod, skip.reason)
            return [skip]
        return [Start(replace(iv, end=max(iv.start, min(end, at)))) for iv in intervals if iv.pod_uid == uid]


def _resource(iv: UsageInterval) -> str:
    return resource_key(iv.kind, iv.mig_profile, iv.gpu_milli)


def node_info(node: Mapping[str, Any], is_spot: Callable[[Mapping[str, str]], bool]) -> NodeInfo | None:
    """A GPU node's product and physical GPU count (the count label survives MIG; nvidia.com/gpu is 0)."""
    labels = _get(node, "metadata", "labels") or {}
    product = labels.get(GPU_PRODUCT_LABEL)
    if not product:
        return None
    count = _quantity(labels.get(GPU_COUNT_LABEL))
    if count is None:
        count = _quantity(_get(node, "status", "capacity", GPU)) or 0
    replicas, _ = node_sharing(labels)
    return NodeInfo(_get(node, "metadata", "name"), product, count, is_spot(labels), replicas)


def capacity(info: NodeInfo, at: datetime) -> NodeCapacity:
    return NodeCapacity(info.node, info.gpu_product, info.gpu_count, at, None, info.spot)


def apply(store: CostStore, actions: Iterable[Action]) -> dict[str, int]:
    """Write actions to the store; returns counts. Idempotent: replaying actions changes nothing."""
    counts = {"started": 0, "ended": 0, "skipped": 0, "duplicates": 0}
    for action in actions:
        if isinstance(action, Start):
            counts["started" if store.start_usage(action.interval) else "duplicates"] += 1
        elif isinstance(action, End):
            counts["ended"] += store.end_usage(action.pod_uid, action.at, action.resource)
        else:
            counts["skipped"] += 1
    return counts
