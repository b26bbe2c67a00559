"""What GPU Feature Discovery says about a node's GPU sharing, read one way for every part of KGWE.

GFD labels a shared node `nvidia.com/gpu.replicas=<n>` and `nvidia.com/gpu.sharing-strategy=time-slicing|mps`
(`1`/`none` when not shared) and keeps `nvidia.com/gpu.count` at the physical GPU count
(docs/facts/sharing.md §2). A pod holding one replica of such a node holds 1/n of one GPU.
"""

from __future__ import annotations

from collections.abc import Mapping

from kgwe.vocab import GPU_REPLICAS_LABEL, GPU_SHARING_STRATEGY_LABEL

# GPUSharingStrategy.spec.mode -> GFD's nvidia.com/gpu.sharing-strategy value
GFD_STRATEGY = {"TimeSlicing": "time-slicing", "MPS": "mps"}
NOT_SHARED = "none"
MAX_REPLICAS_READ = 1024  # a label is untrusted text: a larger value is not believed


def node_sharing(labels: Mapping[str, str]) -> tuple[int, str]:
    """(replicas per GPU, GFD sharing strategy) of a node; (1, "none") when it is not shared."""
    strategy = str(labels.get(GPU_SHARING_STRATEGY_LABEL) or NOT_SHARED)
    try:
        replicas = int(str(labels.get(GPU_REPLICAS_LABEL) or 1))
    except ValueError:
        replicas = 1
    if strategy == NOT_SHARED or not 1 <= replicas <= MAX_REPLICAS_READ:
        return 1, NOT_SHARED
    return replicas, strategy


def annotated_milli(raw: object) -> int | None:
    """Thousandths of one GPU a `kgwe.nvidia.io/gpu-milli` annotation asks (a number; a fraction is dropped),
    or None when it is not a number from 1 to 1000. The extender places a share and the meter charges it by
    this one reading."""
    try:
        value = float(str(raw).strip())
    except ValueError:
        return None
    return int(value) if 1 <= value < 1001 else None


def replica_milli(replicas: int) -> int:
    """Thousandths of one GPU a pod holding one replica holds (whole GPU when not shared). The extender's
    packing and the chargeback both use it, so a replica is placed and priced as the same share."""
    return 1000 // max(1, replicas)
