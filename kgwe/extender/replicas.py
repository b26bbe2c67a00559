"""A pod's hold on a node whose GPUs the device plugin replicates (time-slicing or MPS), per physical GPU.

On such a node (GFD `nvidia.com/gpu.replicas=R`) the plugin advertises R units per GPU, as
`nvidia.com/gpu` or, renamed, `nvidia.com/gpu.shared`. A pod holding k units of one GPU holds k/R of it, so
the scoring core accounts it as a share of k × (1000 // R) milli on one GPU — the same per-GPU column as
`kgwe.nvidia.io/gpu-milli` shares, so the two can never add up beyond one GPU. A milli-annotated pod there
holds at least one unit's share (it takes a unit from the plugin too), so no GPU serves more pods than it
has replicas.
"""

from __future__ import annotations

from dataclasses import replace

from kgwe.extender.request import PodRequest
from kgwe.gpu.sharing import replica_milli

WHOLE = 1000


def on_replicated(req: PodRequest, replicas: int) -> PodRequest:
    """The request as the core must account it on a node with `replicas` per GPU (unchanged when 1)."""
    if replicas <= 1 or not req.gpus or req.mig:
        return req
    units = req.shared_units or req.gpus
    if units >= replicas:  # a whole GPU's worth or more: the plugin hands out replicas of several GPUs
        whole = -(-units // replicas)
        return replace(req, gpus=whole, gpu_milli=WHOLE)
    share = units * replica_milli(replicas)
    if req.milli_annotated:
        share = max(share, req.gpu_milli)
    return replace(req, gpus=1, gpu_milli=min(share, WHOLE))
