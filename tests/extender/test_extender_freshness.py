"""Answers follow the node table: per-node answers are cached per request shape while the node's row is
unchanged, so a node change, an assumption or a bind must give the next pod of the same shape a fresh
answer, and a watch event that changes nothing must not touch the row (and throw its cached answers away)."""

from __future__ import annotations

import orjson

from kgwe.extender.core import NodeTable
from kgwe.extender.engine import Engine
from kgwe.extender.index import ClusterIndex
from kgwe.extender.nodes import NodeState
from kgwe.localcluster.gpunodes import machine, node_manifest


def gpu_pod(uid: str, gpus: int = 1, node: str | None = None) -> dict:
    return {
        "metadata": {
            "name": uid,
            "namespace": "t",
            "uid": uid,
            "creationTimestamp": "2026-11-22T00:00:00Z",
        },
        "spec": {
            "schedulerName": "kgwe-scheduler",
            **({"nodeName": node} if node else {}),
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def args(pod: dict, names: list[str]) -> bytes:
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})


def two_nodes() -> Engine:
    t = NodeTable()
    t.upsert(NodeState("a", gpus=8, product="NVIDIA-H100-80GB-HBM3"))
    t.upsert(NodeState("b", gpus=8, product="NVIDIA-H100-80GB-HBM3", gpu_used_milli=[1000] * 4))
    e = Engine(t)
    e.ready = True
    return e


def test_a_node_change_gives_the_same_request_a_fresh_answer() -> None:
    e = two_nodes()
    body = args(gpu_pod("u1", gpus=6), ["a", "b"])
    first = e.filter(body)
    assert e.filter(body) == first
    assert orjson.loads(first)["NodeNames"] == ["a"]
    prioritized = e.prioritize(body)
    assert e.prioritize(body) == prioritized

    e.table.upsert(NodeState("a", gpus=8, product="NVIDIA-H100-80GB-HBM3", gpu_used_milli=[1000] * 3))
    reply = orjson.loads(e.filter(body))
    assert reply["NodeNames"] == []
    assert reply["FailedNodes"]["a"] == "kgwe: pod needs 6 whole GPUs, node has 5 of 8 free"
    assert e.prioritize(body) != prioritized


def cluster_with_one_free_gpu() -> tuple[Engine, ClusterIndex]:
    e = Engine()
    idx = ClusterIndex(e)
    idx._apply_nodes([node_manifest("a", machine("DGX-H100"))])
    idx._apply_pods([gpu_pod("held", gpus=7, node="a")])
    idx._apply_pending([gpu_pod("u1"), gpu_pod("u2")])
    e.ready = True
    return e, idx


def test_an_assumption_gives_the_next_pod_of_the_same_shape_a_fresh_answer() -> None:
    e, idx = cluster_with_one_free_gpu()
    assert orjson.loads(e.filter(args(gpu_pod("u1"), ["a"])))["NodeNames"] == ["a"]
    assert "u1" in idx.assumed  # the last free GPU is counted as taken until the bind is seen
    reply = orjson.loads(e.filter(args(gpu_pod("u2"), ["a"])))
    assert reply["NodeNames"] == []
    assert reply["FailedNodes"]["a"] == "kgwe: pod needs 1 whole GPUs, node has 0 of 8 free"


def test_a_bind_and_a_deletion_change_the_answer_a_status_update_does_not() -> None:
    e, idx = cluster_with_one_free_gpu()
    body = args(gpu_pod("u2"), ["a"])
    idx._pending_event("DELETED", gpu_pod("u1"))
    assert orjson.loads(e.filter(body))["NodeNames"] == ["a"]
    clock = idx.clock
    idx.clock = lambda: clock() + 3600.0
    idx.expire_assumed()  # only the bind below is to take the GPU
    idx.clock = clock
    assert idx.assumed == {}
    (free_gpu,) = [i for i, used in enumerate(e.node_view("a")["gpuUsedMilli"]) if used == 0]
    generation = e.table.generation

    bound = gpu_pod("u1", node="a")
    idx._pod_event("ADDED", bound)
    assert e.table.generation != generation
    assert orjson.loads(e.filter(body))["NodeNames"] == []

    generation = e.table.generation
    bound["status"]["podIP"] = "10.0.0.7"  # what the kubelet reports next: nothing GPU accounting reads
    idx._pod_event("MODIFIED", bound)
    assert e.table.generation == generation

    # the agent reports the pod on another GPU than the one assumed: the node is accounted again
    bound["metadata"]["annotations"] = {"kgwe.nvidia.io/gpu-index": str((free_gpu + 1) % 8)}
    idx._pod_event("MODIFIED", bound)
    assert e.table.generation != generation and e.node_view("a")["gpuUsedMilli"][free_gpu] == 0

    idx._pod_event("DELETED", bound)
    assert orjson.loads(e.filter(body))["NodeNames"] == ["a"]


def test_a_deferred_assumption_is_made_before_the_next_decision() -> None:
    """The server answers first and assumes right after; a request arriving before that still sees it."""
    e, idx = cluster_with_one_free_gpu()
    e.defer_assumptions = True
    assert orjson.loads(e.filter(args(gpu_pod("u1"), ["a"])))["NodeNames"] == ["a"]
    assert idx.assumed == {}  # not yet: the reply goes out first
    reply = orjson.loads(e.filter(args(gpu_pod("u2"), ["a"])))
    assert "u1" in idx.assumed and reply["NodeNames"] == []


def test_flushing_assumes_and_rescores_the_node_for_that_shape() -> None:
    e, idx = cluster_with_one_free_gpu()
    e.defer_assumptions = True
    e.filter(args(gpu_pod("u1"), ["a"]))
    e.flush_assumptions()
    assert "u1" in idx.assumed and e.deferred == []
    row = e.table.rows["a"]
    (versions, *_), *_ = e.cache._entries.values()
    assert versions[row] == e.table.version[row]  # the next pod of this shape finds the node scored
