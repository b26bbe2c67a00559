"""The extender watches only the KGWE scheduler's pods; GPUs that other pods hold come from the node agent's
`kgwe.nvidia.io/gpu-pods` annotation on the Node (no API server needed here)."""

from __future__ import annotations

import orjson

from kgwe.extender.engine import Engine
from kgwe.extender.index import ClusterIndex, pod_field_selector
from kgwe.extender.k8s import gpu_holders
from kgwe.localcluster.gpunodes import machine, node_manifest


def pod(name: str, node: str, gpus: int, index: str | None = None) -> dict:
    ann = {"kgwe.nvidia.io/gpu-index": index} if index else {}
    return {
        "metadata": {"name": name, "namespace": "t", "uid": f"uid-{name}", "annotations": ann},
        "spec": {
            "nodeName": node,
            "schedulerName": "kgwe-scheduler",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def with_holders(node: dict, holders: dict[int, str]) -> dict:
    node = orjson.loads(orjson.dumps(node))
    node["metadata"].setdefault("annotations", {})["kgwe.nvidia.io/gpu-pods"] = orjson.dumps(
        {str(k): v for k, v in holders.items()}
    ).decode()
    return node


def test_the_pod_watch_selects_pods_of_the_kgwe_scheduler():
    assert pod_field_selector("kgwe-scheduler") == "spec.schedulerName=kgwe-scheduler"
    assert (
        pod_field_selector("kgwe-scheduler", bound=True)
        == "spec.schedulerName=kgwe-scheduler,spec.nodeName!="
    )
    assert pod_field_selector(None, bound=False) == "spec.nodeName="
    assert pod_field_selector(None) == ""
    assert ClusterIndex(Engine()).pod_selector == "spec.schedulerName=kgwe-scheduler"
    assert ClusterIndex(Engine(), scheduler_name=None).pod_selector == ""
    # kube-scheduler the only caller: bound pods only
    trusted = ClusterIndex(Engine(), verify_decisions=False)
    assert trusted.pod_selector == "spec.schedulerName=kgwe-scheduler,spec.nodeName!="
    every_scheduler = ClusterIndex(Engine(), scheduler_name=None, verify_decisions=False)
    assert every_scheduler.pod_selector == "spec.nodeName!="


def pending(name: str, gpus: int) -> dict:
    p = pod(name, "", gpus)
    del p["spec"]["nodeName"]
    p["status"]["phase"] = "Pending"
    return p


def test_one_pod_watch_feeds_pending_and_bound_pods():
    """A pod seen pending, decided (assumed), updated while pending, then bound: the update keeps the
    assumption, the bind ends the pending state and counts the pod once."""
    engine = Engine()
    idx = ClusterIndex(engine)
    idx._apply_nodes([node_manifest("a", machine("DGX-H100"))])
    idx._apply_all_pods([pod("old", "a", 2), pending("new", 1)])
    assert set(idx.pending) == {"uid-new"} and set(idx.pods) == {"uid-old"}
    idx.assume("uid-new", "a", idx.pending["uid-new"])
    assert sum(engine.node_view("a")["gpuUsedMilli"]) == 3000
    updated = pending("new", 1)
    updated["metadata"]["labels"] = {"touched": "yes"}
    idx._any_pod_event("MODIFIED", updated)
    assert "uid-new" in idx.assumed and sum(engine.node_view("a")["gpuUsedMilli"]) == 3000
    idx._any_pod_event("MODIFIED", pod("new", "a", 1))
    assert idx.pending == {} and idx.assumed == {} and set(idx.pods) == {"uid-old", "uid-new"}
    assert sum(engine.node_view("a")["gpuUsedMilli"]) == 3000
    idx._any_pod_event("DELETED", pod("new", "a", 1))
    idx._any_pod_event("DELETED", pending("gone", 1))
    assert set(idx.pods) == {"uid-old"} and sum(engine.node_view("a")["gpuUsedMilli"]) == 2000


def test_gpus_held_by_unwatched_pods_count_as_taken():
    engine = Engine()
    idx = ClusterIndex(engine)
    node = node_manifest("a", machine("DGX-H100"))
    idx._apply_nodes([with_holders(node, {3: "other/trainer", 5: "t/mine"})])
    idx._apply_pods([pod("mine", "a", 1, index="5")])
    used = engine.node_view("a")["gpuUsedMilli"]
    assert used[3] == 1000 and used[5] == 1000 and sum(used) == 2000  # t/mine is counted once
    # a KGWE pod without an index avoids the GPU another pod holds
    idx._pod_event("ADDED", pod("next", "a", 1))
    used = engine.node_view("a")["gpuUsedMilli"]
    assert sum(used) == 3000 and used[3] == 1000
    # the other pod ends: the agent drops it from the annotation
    idx._node_event("MODIFIED", with_holders(node, {5: "t/mine"}))
    assert sum(engine.node_view("a")["gpuUsedMilli"]) == 2000


def test_a_bad_holders_annotation_is_ignored():
    node = node_manifest("a", machine("DGX-H100"))
    for raw in ("{", "[]", '{"x": "p"}', '{"1": 5}', '{"99": "p"}'):
        node["metadata"].setdefault("annotations", {})["kgwe.nvidia.io/gpu-pods"] = raw
        assert gpu_holders(node) == {}


def test_with_kube_scheduler_the_only_caller_a_decision_counts_at_once_and_the_bind_replaces_it():
    """No pending pods are watched: the decision is assumed as made, the bind (the pod's first event) ends
    the assumption and counts the pod once, and the workload mix learns from the bound pod."""
    engine = Engine()
    idx = ClusterIndex(engine, verify_decisions=False)
    idx._apply_nodes([node_manifest("a", machine("DGX-H100"))])
    idx._apply_all_pods([pod("old", "a", 2)])
    assert engine.table.mix  # learned from the pods the watch shows bound
    seen = sum(engine._mix.values())
    body = orjson.dumps({"Pod": pending("new", 1), "Nodes": None, "NodeNames": ["a"]})
    assert orjson.loads(engine.filter(body))["NodeNames"] == ["a"]
    assert set(idx.assumed) == {"uid-new"} and idx.pending == {} and not idx.unconfirmed
    assert sum(engine._mix.values()) == seen  # never from request bodies
    assert sum(engine.node_view("a")["gpuUsedMilli"]) == 3000
    idx._any_pod_event("ADDED", pod("new", "a", 1))
    assert idx.assumed == {} and set(idx.pods) == {"uid-old", "uid-new"}
    assert sum(engine.node_view("a")["gpuUsedMilli"]) == 3000
    assert sum(engine._mix.values()) == seen + 1
    idx._any_pod_event("MODIFIED", pod("new", "a", 1))  # its status: nothing more to learn
    assert sum(engine._mix.values()) == seen + 1
    idx._any_pod_event("DELETED", pod("new", "a", 1))
    assert sum(engine.node_view("a")["gpuUsedMilli"]) == 2000


def test_a_topology_annotation_is_decoded_once_and_again_when_it_changes(monkeypatch):
    import kgwe.extender.index as index_module

    decoded = []
    real = index_module.decode
    monkeypatch.setattr(index_module, "decode", lambda text: decoded.append(text) or real(text))
    idx = ClusterIndex(Engine())
    node = node_manifest("a", machine("DGX-H100"))
    idx._apply_nodes([node, node_manifest("b", machine("DGX-H100"))])  # the same machine, written alike
    for _ in range(3):  # status updates bring the same annotation again
        idx._node_event("MODIFIED", node)
    assert len(decoded) == 1 and idx.bases["a"].topology is idx.bases["b"].topology
    other = node_manifest("a", machine("L40S-8-PCIE"))
    idx._node_event("MODIFIED", other)
    assert len(decoded) == 2 and idx.engine.node_view("a")["topology"] == idx.bases["a"].topology.name
    assert idx.bases["a"].topology is not idx.bases["b"].topology
