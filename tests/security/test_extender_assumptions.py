"""Unauthenticated filter calls must not change the extender's view of the cluster: before this, two POST
/filter requests with made-up 8-GPU pods made every DGX node look full for 30 s. An extender served to
clients nobody verifies (--insecure-any-client) counts decisions only for pods the watch saw pending with
the same request, at most a bounded number per node; the fragmentation mix is learned from watched pods,
never from request bodies. Real Node/Pod manifests through the index's own event handlers (no API server
needed)."""

from __future__ import annotations

import orjson

from kgwe.extender.engine import Engine
from kgwe.extender.index import MAX_ASSUMED_PER_NODE, UNCONFIRMED_SECONDS, ClusterIndex
from kgwe.extender.profile import Profile
from kgwe.localcluster.gpunodes import machine, node_manifest

NODES = ["dgx-1", "dgx-2"]


def gpu_pod(uid: str, gpus: int = 8, milli: int | None = None) -> dict:
    limits = {"nvidia.com/gpu.shared": "1"} if milli else {"nvidia.com/gpu": str(gpus)}
    ann = {"kgwe.nvidia.io/gpu-milli": str(milli)} if milli else {}
    return {
        "metadata": {"name": uid, "namespace": "t", "uid": uid, "annotations": ann},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }


def filter_call(pod: dict, nodes: list[str]) -> bytes:
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": nodes})


def cluster() -> tuple[Engine, ClusterIndex, list[float]]:
    engine = Engine()
    idx = ClusterIndex(engine)
    now = [1000.0]
    idx.clock = lambda: now[0]
    idx._apply_nodes([node_manifest(n, machine("DGX-H100")) for n in NODES])
    idx._apply_pods([])
    idx._apply_pending([])
    return engine, idx, now


def test_decisions_are_verified_exactly_when_the_port_serves_unverified_clients() -> None:
    import argparse

    from kgwe.extender.extender_cmd import add_arguments, cluster_index

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for flags, verified in (([], False), (["--insecure-any-client"], True)):
        args = parser.parse_args(["--kubeconfig", "unused", *flags])
        assert cluster_index(args, Engine(), None, None).verify_decisions is verified


def used(engine: Engine, node: str) -> list[int]:
    return engine.node_view(node)["gpuUsedMilli"]


def test_made_up_pods_in_filter_calls_fill_nothing() -> None:
    engine, idx, now = cluster()
    for i in range(2 * len(NODES)):  # the attack: fake 8-GPU pods, each decided onto a node
        reply = orjson.loads(engine.filter(filter_call(gpu_pod(f"fake-{i}"), NODES)))
        assert len(reply["NodeNames"]) == 1
    assert idx.assumed == {}
    for n in NODES:
        assert used(engine, n) == [0] * 8
    now[0] += UNCONFIRMED_SECONDS + 1
    idx.expire_assumed()
    assert not idx.unconfirmed  # waiting decisions are forgotten, not kept for a pod that never comes


def test_a_real_pending_pod_is_assumed_but_a_different_request_under_its_uid_is_not() -> None:
    engine, idx, _ = cluster()
    idx._pending_event("ADDED", gpu_pod("real", gpus=2))
    # the attacker names the real pod's UID but asks for 8 GPUs: not what the watch saw
    orjson.loads(engine.filter(filter_call(gpu_pod("real", gpus=8), ["dgx-1"])))
    assert idx.assumed == {} and used(engine, "dgx-1") == [0] * 8
    # kube-scheduler's own call for that pod counts
    engine.filter(filter_call(gpu_pod("real", gpus=2), ["dgx-1"]))
    assert set(idx.assumed) == {"real"} and sum(used(engine, "dgx-1")) == 2000


def test_a_decision_before_the_watch_shows_the_pod_counts_once_it_does() -> None:
    """kube-scheduler's watch may see a new pod before ours: its decision waits, then counts."""
    engine, idx, _ = cluster()
    engine.filter(filter_call(gpu_pod("early", milli=600), ["dgx-1"]))
    assert idx.assumed == {} and "early" in idx.unconfirmed
    idx._pending_event("ADDED", gpu_pod("early", milli=600))
    assert set(idx.assumed) == {"early"} and 600 in used(engine, "dgx-1")


def test_assumptions_per_node_are_capped() -> None:
    _, idx, _ = cluster()
    for i in range(MAX_ASSUMED_PER_NODE + 5):
        idx._pending_event("ADDED", gpu_pod(f"s{i}", milli=1))
        idx.assume(f"s{i}", "dgx-1", idx.pending[f"s{i}"])
    assert len(idx.assumed) == MAX_ASSUMED_PER_NODE


def test_request_bodies_do_not_teach_the_workload_mix() -> None:
    engine, idx, _ = cluster()
    engine.set_profiles({"": Profile(fragmentation=30)})
    for i in range(50):
        engine.filter(filter_call(gpu_pod(f"fake-{i}", gpus=3), NODES))
    assert not engine.table.mix  # nothing learned from 50 made-up requests
    idx._pending_event("ADDED", gpu_pod("watched", gpus=2))
    assert engine.table.mix  # a pod the watch saw created is what the mix follows
