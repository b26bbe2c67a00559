"""Samples for the fleet dashboard's topology panels, from the agent's `kgwe.nvidia.io/topology` annotation of
each GPU Node (pure): the node's topology class, its GPUs, and every GPU pair's link with its estimated GB/s
per direction (kgwe.topology.view). A node without the annotation has no samples; a malformed one is counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgwe.errors import KgweError
from kgwe.topology.view import from_annotation
from kgwe.vocab import TOPOLOGY_ANNOTATION


@dataclass
class TopologySamples:
    nodes: list[tuple[str, str]] = field(default_factory=list)  # node, topology class
    gpus: list[tuple[str, str, str, str, str]] = field(default_factory=list)  # node, gpu, model, numa, mig
    links: list[tuple[tuple[str, str, str, str], float]] = field(
        default_factory=list
    )  # (node, a, b, link), GB/s
    invalid: int = 0  # nodes whose annotation does not decode


def topology_samples(nodes: Sequence[Mapping[str, Any]]) -> TopologySamples:
    out = TopologySamples()
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        try:
            found = from_annotation((meta.get("annotations") or {}).get(TOPOLOGY_ANNOTATION))
        except KgweError:
            out.invalid += 1
            continue
        if found is None:
            continue
        out.nodes.append((name, found.name))
        for g in found.gpus:
            numa = "" if g.numa_node is None else str(g.numa_node)
            out.gpus.append((name, str(g.index), g.model, numa, "on" if g.mig_enabled else "off"))
        for link in found.links:
            out.links.append(((name, str(link.gpu_a), str(link.gpu_b), link.label), link.gbps))
    return out
