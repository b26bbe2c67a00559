"""The watch index's list/relist semantics on real Node/Pod manifests (no API server needed): a relist after
410 Gone replaces a kind's state wholesale, so objects deleted while the watch was down do not linger."""

from __future__ import annotations

from kgwe.extender.engine import Engine
from kgwe.extender.index import ClusterIndex
from kgwe.testing.gpunodes import machine, node_manifest


def pod(
    name: str, node: str, resources: dict, annotations: dict | None = None, phase: str = "Running"
) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "t",
            "uid": f"uid-{name}",
            "annotations": annotations or {},
            "creationTimestamp": f"2026-11-22T00:00:{len(name):02d}Z",
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": resources}}]},
        "status": {"phase": phase},
    }


def test_relist_replaces_state_and_events_apply_incrementally() -> None:
    engine = Engine()
    idx = ClusterIndex(engine)
    a = node_manifest("a", machine("DGX-H100"))
    b = node_manifest("b", machine("L40S-8-PCIE"))
    idx._apply_nodes([a, b])
    idx._apply_pods(
        [
            pod("p1", "a", {"nvidia.com/gpu": "2"}),
            pod("p2", "a", {"nvidia.com/gpu.shared": "1"}, {"kgwe.nvidia.io/gpu-milli": "300"}),
            pod("done", "a", {"nvidia.com/gpu": "4"}, phase="Succeeded"),
        ]
    )
    used = engine.node_view("a")["gpuUsedMilli"]
    assert sorted(used) == [0] * 5 + [300, 1000, 1000]  # the finished pod holds nothing
    assert engine.node_view("a")["topology"] == "HGX-H100"

    # while disconnected: node b and pod p1 were deleted, pod p3 bound to b... then 410 -> relist
    idx._apply_nodes([a])
    idx._apply_pods([pod("p2", "a", {"nvidia.com/gpu.shared": "1"}, {"kgwe.nvidia.io/gpu-milli": "300"})])
    assert engine.node_view("b") is None
    assert sorted(engine.node_view("a")["gpuUsedMilli"]) == [0] * 7 + [300]

    # incremental events
    idx._pod_event("ADDED", pod("p4", "a", {"nvidia.com/gpu": "1"}, {"kgwe.nvidia.io/gpu-index": "5"}))
    assert engine.node_view("a")["gpuUsedMilli"][5] == 1000  # the agent's GPU index is honoured
    idx._pod_event("DELETED", pod("p4", "a", {"nvidia.com/gpu": "1"}))
    assert engine.node_view("a")["gpuUsedMilli"][5] == 0
    idx._node_event("DELETED", a)
    assert engine.node_view("a") is None


def test_bad_topology_annotation_keeps_the_node_without_topology() -> None:
    engine = Engine()
    idx = ClusterIndex(engine)
    n = node_manifest("x", machine("DGX-A100"))
    n["metadata"]["annotations"]["kgwe.nvidia.io/topology"] = "{not json"
    idx._apply_nodes([n])
    view = engine.node_view("x")
    assert view["gpus"] == 8 and view["topology"] is None
