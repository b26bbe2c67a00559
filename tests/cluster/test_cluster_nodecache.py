"""The node cache on the real apiserver: it holds the GPU nodes the list+watch loop sees, a reader that names
its own writes gets them only once the cache shows them, and a cache that is not running says so."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client

from kgwe.cluster.nodecache import NodeCache, resource_version_at_least
from kgwe.cluster.nodes import NodeOps

pytestmark = pytest.mark.cluster


def by_name(nodes: list[dict] | None) -> dict[str, dict]:
    assert nodes is not None
    return {n["metadata"]["name"]: n for n in nodes}


def test_a_reader_sees_its_own_writes_and_only_gpu_nodes(k8s_api, gpu_node, kio):
    node = gpu_node("DGX-H100")
    core = client.CoreV1Api(k8s_api)
    plain = f"cpu-{node}"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": plain}})
    stop = threading.Event()
    cache = NodeCache(k8s_api).start(stop)
    try:
        assert node in by_name(cache.nodes({}, timeout_seconds=30))
        assert plain not in by_name(cache.nodes({}, timeout_seconds=30))  # not a GPU node

        ops = NodeOps(k8s_api)
        ops.relabel(node, "kgwe-written")
        version = ops.written[node]
        assert version == core.read_node(node).metadata.resource_version  # what the patch returned
        seen = by_name(cache.nodes(ops.written, timeout_seconds=30))[node]
        assert seen["metadata"]["labels"]["nvidia.com/mig.config"] == "kgwe-written"
        assert resource_version_at_least(seen["metadata"]["resourceVersion"], version)
        ops.forget({node: version})
        assert ops.written == {}

        core.delete_node(node)  # a node deleted since it was written counts as seen
        kio.wait_for(lambda: node not in by_name(cache.nodes({}, timeout_seconds=30)), what="deletion seen")
        assert cache.nodes({node: version}, timeout_seconds=30) is not None
    finally:
        stop.set()
        core.delete_node(plain)


def test_a_cache_that_never_started_or_cannot_catch_up_answers_none(k8s_api, gpu_node):
    idle = NodeCache(k8s_api)
    assert idle.nodes({}, timeout_seconds=0.1) is None
    node = gpu_node("DGX-H100")
    stop = threading.Event()
    cache = NodeCache(k8s_api).start(stop)
    try:
        assert cache.nodes({}, timeout_seconds=30) is not None
        assert cache.nodes({node: str(10**15)}, timeout_seconds=0.5) is None  # a write it cannot have seen
    finally:
        stop.set()


def test_resource_versions_compare_as_integers():
    assert resource_version_at_least("1000", "999")
    assert not resource_version_at_least("999", "1000")
    assert resource_version_at_least("x", "x") and not resource_version_at_least("x", "y")
    assert not resource_version_at_least(None, "1")
