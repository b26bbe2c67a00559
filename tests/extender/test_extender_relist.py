"""The watch index's list/relist semantics on real Node/Pod manifests (no API server needed): a relist after
410 Gone replaces a kind's state wholesale, so objects deleted while the watch was down do not linger."""

from __future__ import annotations

import orjson

from kgwe.extender.app import Metrics
from kgwe.extender.engine import Engine
from kgwe.extender.index import ASSUME_SECONDS, ClusterIndex
from kgwe.extender.request import parse_pod
from kgwe.localcluster.gpunodes import machine, node_manifest


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


def sample(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)


def share_pod(uid: str, milli: int) -> dict:
    """An unbound pod asking `milli` of one GPU."""
    return {
        "metadata": {
            "name": uid,
            "namespace": "t",
            "uid": uid,
            "annotations": {"kgwe.nvidia.io/gpu-milli": str(milli)},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}]},
    }


def share_request(uid: str, milli: int, nodes: list[str]) -> bytes:
    """A filter call as kube-scheduler sends it for `share_pod(uid, milli)`."""
    return orjson.dumps({"Pod": share_pod(uid, milli), "Nodes": None, "NodeNames": nodes})


def pending(idx: ClusterIndex, *pods: dict) -> None:
    """The pending-pod watch shows these pods created (decisions are assumed only for such pods)."""
    for p in pods:
        idx._pending_event("ADDED", p)


def test_decided_pods_count_at_once_until_the_watch_shows_them_bound() -> None:
    """A burst of shared-GPU pods decided before any bind is watched must not over-commit a GPU: each decision
    is counted on its node at once, once more when the watch shows the pod bound, and not twice."""
    engine = Engine()
    idx = ClusterIndex(engine)
    now = [1000.0]
    idx.clock = lambda: now[0]
    idx._apply_nodes([node_manifest("a", machine("DGX-H100"))])
    idx._apply_pods([pod(f"full{i}", "a", {"nvidia.com/gpu": "1"}) for i in range(7)])  # one GPU left
    pending(idx, share_pod("s1", 600), share_pod("s2", 600))

    first = orjson.loads(engine.filter(share_request("s1", 600, ["a"])))
    assert first["NodeNames"] == ["a"]
    assert sorted(engine.node_view("a")["gpuUsedMilli"]) == [600] + [1000] * 7
    # the second share no longer fits on the node: without the assumption it would have passed
    second = orjson.loads(engine.filter(share_request("s2", 600, ["a"])))
    assert second["NodeNames"] == [] and "a" in second["FailedNodes"]
    assert "s2" not in idx.assumed

    bound = pod("s1", "a", {"nvidia.com/gpu.shared": "1"}, {"kgwe.nvidia.io/gpu-milli": "600"})
    bound["metadata"]["uid"] = "s1"
    idx._pod_event("MODIFIED", bound)  # the watch catches up: counted as bound, no longer as assumed
    assert idx.assumed == {}
    assert sorted(engine.node_view("a")["gpuUsedMilli"]) == [600] + [1000] * 7


def test_assumptions_expire_and_follow_a_new_decision() -> None:
    engine = Engine()
    metrics = Metrics()
    idx = ClusterIndex(engine, metrics=metrics)
    now = [1000.0]
    idx.clock = lambda: now[0]
    idx._apply_nodes([node_manifest("a", machine("DGX-H100")), node_manifest("b", machine("DGX-H100"))])
    idx._apply_pods([])
    pending(idx, share_pod("s1", 400))

    engine.filter(share_request("s1", 400, ["a"]))
    assert 400 in engine.node_view("a")["gpuUsedMilli"]
    engine.filter(share_request("s1", 400, ["b"]))  # scheduled again (e.g. its bind failed): moves
    assert 400 not in engine.node_view("a")["gpuUsedMilli"]
    assert 400 in engine.node_view("b")["gpuUsedMilli"]

    now[0] += ASSUME_SECONDS - 1
    idx.expire_assumed()
    assert "s1" in idx.assumed
    assert sample(metrics, "kgwe_extender_assumed_pods") == 1
    now[0] += 2  # never seen bound (deleted before its bind, or a later step failed): forgotten
    idx.expire_assumed()
    assert idx.assumed == {} and engine.node_view("b")["gpuUsedMilli"] == [0] * 8
    assert sample(metrics, "kgwe_extender_assumed_pods") == 0
    assert sample(metrics, "kgwe_extender_assumptions_expired_total") == 1

    bound = pod("late", "a", {"nvidia.com/gpu": "8"})
    idx._pod_event("ADDED", bound)
    idx.assume("uid-late", "a", parse_pod(bound))  # the watch was first: nothing to assume
    assert idx.assumed == {} and engine.node_view("a")["gpuUsedMilli"] == [1000] * 8


def test_a_relist_ends_assumptions_of_pods_it_shows_bound_elsewhere() -> None:
    engine = Engine()
    idx = ClusterIndex(engine)
    idx._apply_nodes([node_manifest("a", machine("DGX-H100")), node_manifest("b", machine("DGX-H100"))])
    idx._apply_pods([])
    pending(idx, share_pod("s1", 400))
    engine.filter(share_request("s1", 400, ["a"]))
    assert 400 in engine.node_view("a")["gpuUsedMilli"]
    moved = pod("s1", "b", {"nvidia.com/gpu.shared": "1"}, {"kgwe.nvidia.io/gpu-milli": "400"})
    moved["metadata"]["uid"] = "s1"
    idx._apply_pods([moved])  # the watch expired meanwhile; the relist has the pod bound on b
    assert idx.assumed == {}
    assert engine.node_view("a")["gpuUsedMilli"] == [0] * 8
    assert 400 in engine.node_view("b")["gpuUsedMilli"]
