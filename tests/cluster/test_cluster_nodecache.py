"""The node cache on the real apiserver: it holds the GPU nodes the list+watch loop sees, a reader gets them
only once the cache shows every node patch the process made, and a cache that is not running says so."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client

from kgwe.cluster.nodecache import NodeCache, resource_version_at_least
from kgwe.cluster.nodes import NodeOps
from kgwe.runtime.kube import KubeCluster

pytestmark = pytest.mark.cluster


def by_name(nodes: list[dict] | None) -> dict[str, dict]:
    assert nodes is not None
    return {n["metadata"]["name"]: n for n in nodes}


def test_a_reader_sees_the_writes_made_through_the_cache_and_only_gpu_nodes(k8s_api, gpu_node, kio):
    node = gpu_node("DGX-H100")
    core = client.CoreV1Api(k8s_api)
    plain = f"cpu-{node}"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": plain}})
    stop = threading.Event()
    cache = NodeCache(k8s_api).start(stop)
    try:
        assert node in by_name(cache.nodes(timeout_seconds=30))
        assert plain not in by_name(cache.nodes(timeout_seconds=30))  # not a GPU node

        written: list[tuple[str, str]] = []

        def wrote(name: str, version: str) -> None:  # as the reconciler wires it: NodeOps -> NodeCache
            written.append((name, version))
            cache.expect(name, version)

        ops = NodeOps(KubeCluster(k8s_api), on_write=wrote)
        before = core.read_node(node).metadata.resource_version
        ops.relabel(node, "kgwe-written")
        ((name, version),) = written
        # the version the write returned: newer than before it, and no newer than now (the MIG manager's
        # stand-in answering the label may have written since)
        now = core.read_node(node).metadata.resource_version
        assert name == node and int(version) > int(before) and resource_version_at_least(now, version)
        seen = by_name(cache.nodes(timeout_seconds=30))[node]  # at once: no stale read of the own write
        assert seen["metadata"]["labels"]["nvidia.com/mig.config"] == "kgwe-written"
        assert (
            set(seen) == {"metadata", "spec"} and "managedFields" not in seen["metadata"]
        )  # what planning reads
        assert seen["metadata"]["annotations"] == core.read_node(node).metadata.annotations
        assert resource_version_at_least(seen["metadata"]["resourceVersion"], version)

        core.delete_node(node)  # a node deleted since it was written counts as shown
        cache.expect(node, version)
        kio.wait_for("deletion seen", lambda: node not in by_name(cache.nodes(timeout_seconds=30)))
    finally:
        stop.set()
        core.delete_node(plain)


def test_a_cache_that_never_started_or_cannot_catch_up_answers_none(k8s_api, gpu_node):
    idle = NodeCache(k8s_api)
    assert idle.nodes(timeout_seconds=0.1) is None
    node = gpu_node("DGX-H100")
    stop = threading.Event()
    cache = NodeCache(k8s_api).start(stop)
    try:
        assert cache.nodes(timeout_seconds=30) is not None
        cache.expect(node, str(10**15))  # a write it cannot have seen
        assert cache.nodes(timeout_seconds=0.5) is None
    finally:
        stop.set()


def test_resource_versions_compare_as_integers():
    assert resource_version_at_least("1000", "999")
    assert not resource_version_at_least("999", "1000")
    assert resource_version_at_least("x", "x") and not resource_version_at_least("x", "y")
    assert not resource_version_at_least(None, "1")
