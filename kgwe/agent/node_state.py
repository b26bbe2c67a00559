"""What the agent wants on its Node (labels and annotations), and the minimal patch to get there. Pure."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from kgwe.topology import annotation, choice, known
from kgwe.topology.model import NodeTopology

PREFIX = "kgwe.nvidia.io/"
GPU_PODS_ANNOTATION = PREFIX + "gpu-pods"


def desired_labels(topo: NodeTopology) -> dict[str, str | None]:
    """Labels for node selection; None removes a label that no longer applies."""
    n = topo.size
    all_gpus = frozenset(g.index for g in topo.gpus)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    return {
        PREFIX + "topology": known.identify(topo),
        PREFIX + "gpu-count": str(n),
        PREFIX + "nvlink": str(any(topo.has_nvlink(i, j) for i, j in pairs)).lower(),
        PREFIX + "nvswitch": str(any(g.nvswitch_links for g in topo.gpus)).lower(),
        PREFIX + "numa-nodes": str(len({g.numa_node for g in topo.gpus if g.numa_node is not None})),
        PREFIX + "ring-gbps": str(int(choice.ring_bottleneck_gbps(topo, all_gpus))) if n >= 2 else None,
    }


def desired_annotations(topo: NodeTopology, holders: Mapping[int, str] | None) -> dict[str, str]:
    """The topology annotation, plus GPU index -> "namespace/pod" when the kubelet told us."""
    out = {annotation.ANNOTATION_KEY: annotation.encode(topo)}
    if holders is not None:
        out[GPU_PODS_ANNOTATION] = orjson.dumps(
            {str(k): v for k, v in sorted(holders.items())}, option=orjson.OPT_SORT_KEYS
        ).decode()
    return out


def node_patch(
    current_labels: Mapping[str, str] | None,
    current_annotations: Mapping[str, str] | None,
    labels: Mapping[str, str | None],
    annotations: Mapping[str, str | None],
) -> dict | None:
    """A strategic-merge patch body with only what differs, or None when the Node is already right."""
    cur_l, cur_a = dict(current_labels or {}), dict(current_annotations or {})
    label_diff = {k: v for k, v in labels.items() if cur_l.get(k) != v and not (v is None and k not in cur_l)}
    ann_diff = {
        k: v for k, v in annotations.items() if cur_a.get(k) != v and not (v is None and k not in cur_a)
    }
    if not label_diff and not ann_diff:
        return None
    meta: dict = {}
    if label_diff:
        meta["labels"] = label_diff
    if ann_diff:
        meta["annotations"] = ann_diff
    return {"metadata": meta}
