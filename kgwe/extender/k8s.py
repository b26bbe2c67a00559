"""Kubernetes objects (plain JSON dicts) -> the scoring core's NodeState, and pod GPU accounting.

Which physical GPU a bound pod holds: the annotation `kgwe.nvidia.io/gpu-index` ("3" or "0,1") when the
node agent has written it; otherwise the extender assumes what the device plugin would do with the same
information: shares go best-fit onto the fullest GPU that still fits, whole GPUs onto the best free set
(topology choice when the node publishes its topology, else the lowest free indices). Pods are replayed in
creation order so the assumption is stable across restarts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson

from kgwe.errors import KgweError
from kgwe.extender.nodes import NodeState
from kgwe.extender.replicas import on_replicated
from kgwe.extender.request import (
    GPU,
    GPU_SHARED,
    LABEL_FAMILY,
    LABEL_PRODUCT,
    MIG_PREFIX,
    PodRequest,
    RequestError,
    cpu_milli,
    memory_mib,
    parse_pod,
)
from kgwe.gpu.sharing import node_sharing
from kgwe.objects import Node, Pod
from kgwe.quantity import whole
from kgwe.topology import health
from kgwe.topology.model import NodeTopology
from kgwe.vocab import (
    GPU_COUNT_LABEL,
    GPU_INDEX_ANNOTATION,
    GPU_MEMORY_LABEL,
    GPU_PODS_ANNOTATION,
    NODE_PRIORITY_LABEL,
    TOPOLOGY_ANNOTATION,
)

ENDED_PHASES = ("Succeeded", "Failed")  # a pod in these holds nothing on its node
MAX_COUNT = 2**31  # a count beyond any node (a hostile "1e30" label) stays a small integer
UNREADABLE_HOLDING = PodRequest(gpus=16)  # a bound pod whose resources cannot be read: every GPU of its node

Decoder = Callable[[str], NodeTopology]


def _int(value: object, default: int = 0) -> int:
    """A whole number (a count label, an extended resource in any quantity spelling), else `default`."""
    try:
        return min(whole(value if isinstance(value, int) else str(value)), MAX_COUNT)
    except ValueError:
        return default


def node_state(node: Node, decode_topology: Decoder | None = None) -> NodeState:
    """Base state of a Node object (nothing allocated yet): GPUs, product, memory, MIG, CPU, topology."""
    meta = node.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    ann = meta.get("annotations") or {}
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    gpus = _int(alloc.get(GPU), 0)
    if not gpus and alloc.get(GPU_SHARED):
        gpus = _int(labels.get(GPU_COUNT_LABEL), 0)
    gpus = max(gpus, _int(labels.get(GPU_COUNT_LABEL), 0)) if alloc.get(GPU_SHARED) else gpus
    replicas, _ = node_sharing(labels)
    if replicas > 1:  # the plugin advertises replicas; GFD's count stays the physical GPUs
        advertised = max(_int(alloc.get(GPU), 0), _int(alloc.get(GPU_SHARED), 0))
        gpus = _int(labels.get(GPU_COUNT_LABEL), 0) or advertised // replicas
    mig = {k[len(MIG_PREFIX) :]: _int(v) for k, v in alloc.items() if k.startswith(MIG_PREFIX)}
    topology: NodeTopology | None = None
    raw = ann.get(TOPOLOGY_ANNOTATION)
    if raw and decode_topology is not None:
        try:
            topology = decode_topology(raw)
        except Exception:  # a bad annotation must not take the node (or the index) down
            topology = None
    try:
        cpu = cpu_milli(alloc["cpu"]) if "cpu" in alloc else None
        mem = memory_mib(alloc["memory"]) if "memory" in alloc else None
    except RequestError:
        cpu = mem = None
    kwargs: dict[str, Any] = {}
    if cpu is not None:
        kwargs["cpu_milli"] = cpu
    if mem is not None:
        kwargs["memory_mib"] = mem
    try:
        priority = float(labels.get(NODE_PRIORITY_LABEL, 0))
    except ValueError:
        priority = 0.0
    return NodeState(
        unhealthy=unhealthy_gpus(ann),
        name=str(meta.get("name", "")),
        gpus=min(gpus, 16),
        product=labels.get(LABEL_PRODUCT, ""),
        family=labels.get(LABEL_FAMILY, ""),
        model=labels.get(LABEL_PRODUCT, ""),
        gpu_memory_mib=_int(labels.get(GPU_MEMORY_LABEL), 0),
        mig_free=mig,
        priority=priority,
        topology=topology,
        labels=labels,
        replicas=replicas,
        **kwargs,
    )


def unhealthy_gpus(annotations: Mapping[str, str]) -> dict[int, str]:
    """GPU index -> reason from the agent's gpu-health annotation; {} when absent or malformed (a broken
    annotation is the agent's bug, not a sick GPU: the node stays as schedulable as it was before)."""
    try:
        return {i: f.reason for i, f in health.decode(annotations.get(health.ANNOTATION_KEY)).items()}
    except KgweError:
        return {}


def gpu_holders(node: Node) -> dict[int, str]:
    """GPU index -> "namespace/pod" as the node agent last read it from the kubelet; {} when absent or bad.

    This is how the extender counts GPUs held by pods it does not watch (placed by other schedulers)."""
    raw = (((node.get("metadata") or {}).get("annotations")) or {}).get(GPU_PODS_ANNOTATION)
    if not raw:
        return {}
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(doc, dict):
        return {}
    out = {}
    for key, holder in list(doc.items())[:64]:
        index = _int(key, -1)
        if 0 <= index < 64 and isinstance(holder, str) and holder:
            out[index] = holder
    return out


def pod_key(pod: Pod) -> str:
    """ "namespace/name", as the agent names a GPU's holder."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def held_request(pod: Pod) -> PodRequest:
    """What a bound pod holds. Its resources decide; its own annotations may size a share of
    nvidia.com/gpu.shared but never make it hold nothing: an annotation it made unreadable after binding
    (they can be edited, resources cannot) is ignored, so the pod still holds its GPUs, a share at its
    default size (a whole GPU for one unit), and the node is not offered twice."""
    try:
        return parse_pod(pod)
    except RequestError:
        pass
    try:  # its GPU resources alone (a CPU or memory quantity in a form the parser does not read is kube-
        return parse_pod(_gpu_resources_only(pod))  # scheduler's to account; GPUs are ours)
    except RequestError:  # GPU resources that cannot be read: the most a pod can hold on its node
        return UNREADABLE_HOLDING


def _gpu_resources_only(pod: Pod) -> Pod:
    """The pod without annotations and with only GPU resources in its containers."""

    def gpu_only(container: object) -> object:
        if not isinstance(container, Mapping):
            return container
        res = container.get("resources") or {}
        if not isinstance(res, Mapping):
            return {}
        kept = {
            part: {k: v for k, v in values.items() if k in (GPU, GPU_SHARED) or k.startswith(MIG_PREFIX)}
            for part, values in res.items()
            if part in ("limits", "requests") and isinstance(values, Mapping)
        }
        return {"resources": kept}

    spec: dict[str, Any] = dict(pod.get("spec") or {})
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            spec[key] = [gpu_only(c) for c in spec[key]]
    return cast(Pod, {**pod, "metadata": {**(pod.get("metadata") or {}), "annotations": {}}, "spec": spec})


def pod_holds(pod: Pod) -> tuple[PodRequest, tuple[int, ...] | None] | None:
    """(request, explicit GPU indices or None) of a pod that holds node resources; None if it holds none.
    A pending pod that cannot be understood holds nothing (the filter refuses it too); a bound one holds
    what its resources say (held_request)."""
    status = pod.get("status") or {}
    if status.get("phase") in ENDED_PHASES:
        return None
    if (pod.get("spec") or {}).get("nodeName"):
        req = held_request(pod)
    else:
        try:
            req = parse_pod(pod)
        except RequestError:
            return None
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_INDEX_ANNOTATION)
    indices = None
    if raw:
        try:
            indices = tuple(int(x) for x in str(raw).split(",") if x.strip())
        except ValueError:
            indices = None
    return req, indices


@dataclass
class Tally:
    """What `account` has added up so far on one node: per-GPU share used, MIG instances left (not yet
    clamped at 0), CPU and memory used. Kept by the watch index so that one more pod at the end of a node's
    sequence (an assumption) is one `tally_add`, not a replay of every pod."""

    used: list[int]
    mig: dict[str, int]
    cpu_milli: int = 0
    memory_mib: int = 0

    def copy(self) -> Tally:
        return Tally(list(self.used), dict(self.mig), self.cpu_milli, self.memory_mib)


Chooser = Callable[[NodeTopology, frozenset[int], int], Sequence[int] | None]


def tally_start(base: NodeState) -> Tally:
    """The tally of a node without pods. An unhealthy GPU counts as taken whole, and its MIG instances
    (known from the topology annotation) as not there."""
    used = [1000 if i in base.unhealthy else 0 for i in range(base.gpus)]
    mig = dict(base.mig_free)
    for gpu in getattr(base.topology, "gpus", ()):
        if gpu.index in base.unhealthy:
            for device in gpu.mig_devices:
                mig[device.profile] = mig.get(device.profile, 0) - 1
    return Tally(used, mig)


def tally_add(
    tally: Tally,
    base: NodeState,
    req: PodRequest,
    indices: tuple[int, ...] | None,
    choose_whole: Chooser | None = None,
) -> None:
    """Add one pod to `tally` (in place), on `indices` when given and valid, else where the device plugin
    would put it given what the tally already holds."""
    used = tally.used
    req = on_replicated(req, base.replicas)
    tally.cpu_milli += req.cpu_milli
    tally.memory_mib += req.memory_mib
    for prof, n in req.mig:
        tally.mig[prof] = tally.mig.get(prof, 0) - n
    if not req.gpus:
        return
    if indices and all(0 <= i < base.gpus for i in indices):
        picked = list(indices)
    elif req.shared:
        fits = [i for i in range(base.gpus) if 1000 - used[i] >= req.gpu_milli]
        picked = [min(fits, key=lambda i: 1000 - used[i])] if fits else []
    else:
        free = [i for i in range(base.gpus) if used[i] == 0]
        picked = []
        if base.topology is not None and choose_whole is not None and req.gpus >= 2:
            picked = list(choose_whole(base.topology, frozenset(free), req.gpus) or [])
        picked = picked or free[: req.gpus]
    for i in picked:
        used[i] = min(1000, used[i] + req.gpu_milli)


def tally_state(base: NodeState, tally: Tally) -> NodeState:
    """The node's state with what `tally` holds allocated."""
    return NodeState(
        name=base.name,
        gpus=base.gpus,
        gpu_used_milli=list(tally.used),
        product=base.product,
        family=base.family,
        model=base.model,
        gpu_memory_mib=base.gpu_memory_mib,
        mig_free={k: max(0, v) for k, v in tally.mig.items()},
        cpu_milli=base.cpu_milli,
        cpu_used_milli=tally.cpu_milli,
        memory_mib=base.memory_mib,
        memory_used_mib=tally.memory_mib,
        priority=base.priority,
        topology=base.topology,
        labels=base.labels,
        unhealthy=base.unhealthy,
        replicas=base.replicas,
    )


def tally_of(
    base: NodeState,
    pods: Iterable[tuple[PodRequest, tuple[int, ...] | None]],
    choose_whole: Chooser | None = None,
) -> Tally:
    """The tally of these pods (in creation order) on `base`."""
    out = tally_start(base)
    for req, indices in pods:
        tally_add(out, base, req, indices, choose_whole)
    return out


def account(
    base: NodeState,
    pods: Iterable[tuple[PodRequest, tuple[int, ...] | None]],
    choose_whole: Chooser | None = None,
) -> NodeState:
    """The node's state with these bound pods (in creation order) applied."""
    return tally_state(base, tally_of(base, pods, choose_whole))
