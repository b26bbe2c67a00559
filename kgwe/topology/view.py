"""A node's GPUs and the links between them, as people read them: from the agent's `kgwe.nvidia.io/topology`
annotation to rows (GPU index, model, memory, NUMA node; per pair the nvidia-smi `topo -m` label, the path and
the estimated GB/s per direction). `kgwe nodes NODE -o wide` prints it and the fleet dashboard's topology
panels read it as metrics. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kgwe.errors import KgweError
from kgwe.topology.annotation import MAX_BYTES, decode
from kgwe.topology.model import NodeTopology

_DECODED_CACHE = 4096  # annotations kept decoded (one per node; the collector re-reads them every scrape)


@dataclass(frozen=True)
class GPUView:
    index: int
    model: str
    memory_mib: int
    numa_node: int | None
    mig_enabled: bool
    nvswitch_links: int


@dataclass(frozen=True)
class LinkView:
    gpu_a: int
    gpu_b: int
    label: str  # as nvidia-smi topo -m prints it: NV<links>, PIX, PXB, PHB, NODE, SYS
    via: str  # nvlink, nvswitch or pcie
    gbps: float  # estimated, one direction (kgwe.topology.model)


@dataclass(frozen=True)
class TopologyView:
    name: str
    gpus: tuple[GPUView, ...]
    links: tuple[LinkView, ...]  # every pair once, a < b
    matrix: tuple[tuple[str, ...], ...]  # topo -m cells, by position in `gpus`


def view(topo: NodeTopology) -> TopologyView:
    n = topo.size
    return TopologyView(
        name=topo.name,
        gpus=tuple(
            GPUView(g.index, g.name, g.memory_mib, g.numa_node, g.mig_enabled, g.nvswitch_links)
            for g in topo.gpus
        ),
        links=tuple(
            LinkView(
                topo.gpus[i].index,
                topo.gpus[j].index,
                topo.label(i, j),
                topo.via(i, j),
                topo.bandwidth_gbps[i][j],
            )
            for i in range(n)
            for j in range(i + 1, n)
        ),
        matrix=topo.matrix(),
    )


def from_annotation(text: str | None) -> TopologyView | None:
    """The view of an annotation value; None when absent, KgweError when malformed or oversized."""
    if text is None:
        return None
    if len(text) > MAX_BYTES:
        raise KgweError(f"topology annotation is {len(text)} bytes, over {MAX_BYTES}")
    return _decoded(text)


@lru_cache(maxsize=_DECODED_CACHE)
def _decoded(text: str) -> TopologyView:
    return view(decode(text))


def to_document(v: TopologyView) -> dict[str, Any]:
    """The view as JSON/YAML output gives it (camelCase, like the API)."""
    return {
        "name": v.name,
        "gpus": [
            {
                "index": g.index,
                "model": g.model,
                "memoryMiB": g.memory_mib,
                "numaNode": g.numa_node,
                "migEnabled": g.mig_enabled,
                "nvswitchLinks": g.nvswitch_links,
            }
            for g in v.gpus
        ],
        "links": [
            {
                "gpus": [link.gpu_a, link.gpu_b],
                "link": link.label,
                "via": link.via,
                "bandwidthGBps": link.gbps,
            }
            for link in v.links
        ],
    }


def text(node: str, v: TopologyView) -> str:
    """The GPU table with the topo -m matrix beside it, and each distinct link's estimated bandwidth."""
    headers = ["GPU", "MODEL", "MEMORY", "NUMA", "MIG", *(f"GPU{g.index}" for g in v.gpus)]
    rows = [
        [
            str(g.index),
            g.model,
            f"{g.memory_mib}Mi",
            "-" if g.numa_node is None else str(g.numa_node),
            "on" if g.mig_enabled else "off",
            *v.matrix[pos],
        ]
        for pos, g in enumerate(v.gpus)
    ]
    widths = [max(len(r[c]) for r in [headers, *rows]) for c in range(len(headers))]
    lines = [f"{node}: {v.name}, {len(v.gpus)} GPUs"]
    for r in [headers, *rows]:
        lines.append("   ".join(cell.ljust(widths[c]) for c, cell in enumerate(r)).rstrip())
    speeds: dict[str, set[float]] = {}
    for link in v.links:
        speeds.setdefault(link.label, set()).add(link.gbps)
    legend = ", ".join(
        f"{label} {'/'.join(f'{s:g}' for s in sorted(gbps))}" for label, gbps in sorted(speeds.items())
    )
    lines.append(f"GB/s per direction (estimated): {legend}" if legend else "one GPU: no links")
    return "\n".join(lines) + "\n"
