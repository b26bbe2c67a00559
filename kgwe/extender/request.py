"""What a pod asks of GPUs, read from the pod JSON exactly as kube-scheduler sends it.

Where each requirement comes from (documented contract for workload authors and the GitOps controller):

- whole GPUs: resource `nvidia.com/gpu` (requests or limits; containers summed, init containers maxed).
- a share of ONE GPU: resource `nvidia.com/gpu.shared` plus annotation `kgwe.nvidia.io/gpu-milli`
  (1..999, thousandths of one physical GPU; default 1000 // shared count when absent).
- MIG: resources `nvidia.com/mig-<profile>` (mixed strategy names, e.g. `nvidia.com/mig-1g.10gb`).
- product / architecture: annotation `kgwe.nvidia.io/gpu-product` (`|`-separated alternatives, each matched
  case-insensitively as a substring of the node's `nvidia.com/gpu.product` label or its model key) and
  `kgwe.nvidia.io/gpu-family` (GFD `nvidia.com/gpu.family`, e.g. `hopper|ampere`). nodeSelector entries for
  `nvidia.com/gpu.product` / `nvidia.com/gpu.family` are read too, so the extender explains the failure.
- minimum memory per GPU: annotation `kgwe.nvidia.io/min-memory-gb` in decimal GB as GPUs are sold
  (an H100 "80GB" reports 81559 MiB = 85.5 GB), compared with GFD `nvidia.com/gpu.memory` (MiB).
- topology: annotations `kgwe.nvidia.io/topology-preference` (None, NVLinkOptimal, ...) and
  `kgwe.nvidia.io/min-bandwidth-gbps`.
- profile: annotation `kgwe.nvidia.io/scoring-profile` (else the default profile).
- soft preferences: preferred node affinity, preferred pod (anti-)affinity and `ScheduleAnyway` topology
  spread are weighed by kube-scheduler's own score plugins, not by KGWE; a pod stating any of them is not
  decided in filter (see Profile.decide_in_filter), so both views are combined in prioritize.

Bad values raise RequestError, which the server turns into a 400 with the message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kgwe.gpu.sharing import annotated_milli
from kgwe.quantity import in_units, milli, parse_quantity, whole
from kgwe.vocab import (
    GPU_FAMILY_ANNOTATION,
    GPU_FAMILY_LABEL,
    GPU_MILLI_ANNOTATION,
    GPU_PRODUCT_ANNOTATION,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    MIN_BANDWIDTH_ANNOTATION,
    MIN_MEMORY_ANNOTATION,
    SCORING_PROFILE_ANNOTATION,
    SHARED_GPU_RESOURCE,
    TOPOLOGY_PREFERENCE_ANNOTATION,
    TOPOLOGY_PREFERENCES,
)

GPU = GPU_RESOURCE
GPU_SHARED = SHARED_GPU_RESOURCE
MIG_PREFIX = MIG_RESOURCE_PREFIX
ANN_MILLI = GPU_MILLI_ANNOTATION
ANN_PRODUCT = GPU_PRODUCT_ANNOTATION
ANN_FAMILY = GPU_FAMILY_ANNOTATION
ANN_MIN_MEMORY = MIN_MEMORY_ANNOTATION
ANN_PREFERENCE = TOPOLOGY_PREFERENCE_ANNOTATION
ANN_MIN_BW = MIN_BANDWIDTH_ANNOTATION
ANN_PROFILE = SCORING_PROFILE_ANNOTATION
LABEL_PRODUCT = GPU_PRODUCT_LABEL
LABEL_FAMILY = GPU_FAMILY_LABEL

GB_MIB = 1e9 / 2**20  # one decimal GB in MiB
PREFERENCES = TOPOLOGY_PREFERENCES


class RequestError(ValueError):
    """The pod cannot be understood; the message is shown to the caller."""


@dataclass(frozen=True)
class PodRequest:
    """GPU needs of one pod. `shape` is the cache key: pods with equal shapes get equal per-node answers."""

    gpus: int = 0  # whole GPUs
    gpu_milli: int = 1000  # per-GPU share; < 1000 only when gpus == 1 and the pod shares a GPU
    mig: tuple[tuple[str, int], ...] = ()  # (profile, count), sorted
    cpu_milli: int = 0
    memory_mib: int = 0
    products: tuple[str, ...] = ()  # lower-case alternatives; empty = any
    families: tuple[str, ...] = ()
    min_memory_mib: int = 0
    preference: str = "None"
    min_bandwidth_gbps: float | None = None
    profile: str | None = None
    uid: str = field(default="", compare=False)
    soft_preferences: bool = field(default=False, compare=False)
    # What the pod asks of a node whose GPUs the device plugin replicates (kgwe.extender.replicas): the
    # nvidia.com/gpu.shared quantity, and whether the share comes from the gpu-milli annotation.
    shared_units: int = 0
    milli_annotated: bool = False

    @property
    def shared(self) -> bool:
        return self.gpus == 1 and self.gpu_milli < 1000

    @property
    def gpu_milli_total(self) -> int:
        return self.gpus * self.gpu_milli

    @property
    def wants_gpu(self) -> bool:
        return self.gpus > 0 or bool(self.mig)

    @property
    def shape(self) -> tuple[object, ...]:
        return (
            self.gpus,
            self.gpu_milli,
            self.mig,
            self.cpu_milli,
            self.memory_mib,
            self.products,
            self.families,
            self.min_memory_mib,
            self.preference,
            self.min_bandwidth_gbps,
            self.shared_units,
            self.milli_annotated,
        )


MAX_AMOUNT = 2**62  # larger amounts (the API server accepts "1e30") fit no node; kept finite for the arrays


def _count(value: object, what: str) -> int:
    """Extended resources are whole numbers, in any spelling the API server takes ("2", "2e0", "2000m")."""
    try:
        return min(whole(value), MAX_AMOUNT)
    except ValueError as exc:
        raise RequestError(f"{what}: {exc}") from None


def _amount(value: object, what: str, read: Callable[[object], int]) -> int:
    try:
        negative = parse_quantity(value) < 0
        n = read(value)
    except ValueError as exc:
        raise RequestError(f"{what}: {exc}") from None
    if negative:
        raise RequestError(f"{what}: must not be negative, got {value!r}")
    return min(n, MAX_AMOUNT)


def cpu_milli(value: object) -> int:
    return _amount(value, "cpu", milli)


def memory_mib(value: object) -> int:
    return _amount(value, "memory", lambda v: in_units(v, 2**20))


def _container_resources(container: Mapping[str, Any]) -> dict[str, object]:
    res = container.get("resources") or {}
    if not isinstance(res, dict):
        raise RequestError("container resources must be an object")
    merged: dict[str, object] = {}
    for part in ("limits", "requests"):  # requests win; extended resources must be equal anyway
        values = res.get(part) or {}
        if not isinstance(values, dict):
            raise RequestError(f"container resources.{part} must be an object")
        merged.update(values)
    return merged


def _sum_resources(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """Pod-level need: sum over containers, max with each init container (kube-scheduler's rule)."""
    totals: dict[str, int] = {}

    def read(container: Mapping[str, Any]) -> dict[str, int]:
        if not isinstance(container, dict):
            raise RequestError("containers must be objects")
        out: dict[str, int] = {}
        for name, value in _container_resources(container).items():
            if name == "cpu":
                out[name] = cpu_milli(value)
            elif name == "memory":
                out[name] = memory_mib(value)
            elif name in (GPU, GPU_SHARED) or name.startswith(MIG_PREFIX):
                out[name] = _count(value, name)
        return out

    containers = pod_spec.get("containers") or []
    if not isinstance(containers, list):
        raise RequestError("spec.containers must be a list")
    for c in containers:
        for k, v in read(c).items():
            totals[k] = totals.get(k, 0) + v
    init = pod_spec.get("initContainers") or []
    if not isinstance(init, list):
        raise RequestError("spec.initContainers must be a list")
    for c in init:
        for k, v in read(c).items():
            totals[k] = max(totals.get(k, 0), v)
    return totals


def _alternatives(text: str) -> tuple[str, ...]:
    return tuple(sorted({p.strip().lower() for p in str(text).split("|") if p.strip()}))


def _float(value: str, what: str) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise RequestError(f"annotation {what}: expected a number, got {value!r}") from None
    if f < 0 or f != f:
        raise RequestError(f"annotation {what}: must be a non-negative number")
    return f


def _has_soft_preferences(spec: Mapping[str, Any]) -> bool:
    """Does the pod state preferences only kube-scheduler's score plugins weigh? (Malformed parts count as
    none: the API server validated the pod, and this only chooses between two correct answers.)"""
    affinity = spec.get("affinity")
    if isinstance(affinity, dict):
        for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
            terms = affinity.get(kind)
            if isinstance(terms, dict) and terms.get("preferredDuringSchedulingIgnoredDuringExecution"):
                return True
    spread = spec.get("topologySpreadConstraints")
    if isinstance(spread, list):
        return any(isinstance(c, dict) and c.get("whenUnsatisfiable") == "ScheduleAnyway" for c in spread)
    return False


def parse_pod(pod: object) -> PodRequest:
    """Read a v1.Pod (dict from JSON) into a PodRequest; RequestError on anything malformed. Objects are
    checked as dicts, which JSON gives: a Mapping check goes through the ABC machinery (a fifth of the
    parse)."""
    if not isinstance(pod, dict):
        raise RequestError("Pod must be an object")
    meta = pod.get("metadata") or {}
    spec = pod.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise RequestError("Pod needs metadata and spec objects")
    ann = meta.get("annotations") or {}
    if not isinstance(ann, dict):
        raise RequestError("metadata.annotations must be an object")
    totals = _sum_resources(spec)
    gpus = totals.get(GPU, 0)
    shared = totals.get(GPU_SHARED, 0)
    milli = 1000
    if shared:
        if gpus:
            raise RequestError(f"a pod asks either {GPU} or {GPU_SHARED}, not both")
        raw = ann.get(ANN_MILLI)
        share = 1000 // shared if raw is None else annotated_milli(raw)
        if share is None or share < 1:
            raise RequestError(f"annotation {ANN_MILLI}: must be a number between 1 and 1000, got {raw!r}")
        milli, gpus = share, 1
    mig = tuple(
        sorted((k[len(MIG_PREFIX) :], v) for k, v in totals.items() if k.startswith(MIG_PREFIX) and v)
    )
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, dict):
        raise RequestError("spec.nodeSelector must be an object")
    products = _alternatives(ann.get(ANN_PRODUCT) or selector.get(LABEL_PRODUCT) or "")
    families = _alternatives(ann.get(ANN_FAMILY) or selector.get(LABEL_FAMILY) or "")
    min_mem = ann.get(ANN_MIN_MEMORY)
    min_bw = ann.get(ANN_MIN_BW)
    preference = str(ann.get(ANN_PREFERENCE) or "None")
    if preference not in PREFERENCES:
        raise RequestError(
            f"annotation {ANN_PREFERENCE}: {preference!r} is not one of {', '.join(PREFERENCES)}"
        )
    profile = ann.get(ANN_PROFILE)
    return PodRequest(
        gpus=gpus,
        gpu_milli=milli,
        mig=mig,
        cpu_milli=totals.get("cpu", 0),
        memory_mib=totals.get("memory", 0),
        products=products,
        families=families,
        min_memory_mib=int(_float(min_mem, ANN_MIN_MEMORY) * GB_MIB) if min_mem is not None else 0,
        preference=preference,
        min_bandwidth_gbps=_float(min_bw, ANN_MIN_BW) if min_bw is not None else None,
        profile=str(profile) if profile else None,
        uid=str(meta.get("uid") or ""),
        soft_preferences=_has_soft_preferences(spec),
        shared_units=shared,
        milli_annotated=bool(shared) and ann.get(ANN_MILLI) is not None,
    )
