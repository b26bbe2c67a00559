"""The metering watch loop against the real control plane (kube-apiserver, kube-scheduler, kwok)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from kgwe.cost.metering_watch import MeteringWatch
from kgwe.cost.usage import Period
from tests.harness.pods import gpu_pod
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster


class Running:
    def __init__(self, api, store):
        self.watch = MeteringWatch(api, store, watch_timeout_s=2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.watch.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def close(self):
        self.stop.set()
        self.thread.join(30)


def test_watch_meters_pods_and_reconciles_after_restart(k8s_api, namespace, gpu_node, store):
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-H100")

    def mine():  # every interval of this test's namespace, open or closed
        now = datetime.now(UTC)
        window = Period(now - timedelta(days=1), now + timedelta(days=1))
        return [iv for iv in store.usage(window) if iv.namespace == namespace]

    core.patch_namespace(namespace, {"metadata": {"labels": {"kgwe.nvidia.io/team": "red"}}})
    meter = Running(k8s_api, store)
    try:
        core.create_namespaced_pod(namespace, gpu_pod("a", node, 2))
        wait_for("pod a metered", lambda: [iv.pod for iv in mine()] == ["a"])
        [a] = mine()
        assert a.count == 2 and a.node == node and a.team == "red" and a.end is None
        assert a.gpu_product == "NVIDIA-H100-80GB-HBM3"
    finally:
        meter.close()

    # while metering is down: a is deleted, b starts
    core.delete_namespaced_pod("a", namespace, grace_period_seconds=0)
    core.create_namespaced_pod(namespace, gpu_pod("b", node, 1))
    wait_for("pod b running", lambda: core.read_namespaced_pod("b", namespace).status.phase == "Running")
    wait_for(
        "pod a gone",
        lambda: not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "a"],
    )

    meter = Running(k8s_api, store)
    try:
        wait_for("resync", meter.watch.synced.is_set)
        wait_for(
            "b metered, a closed",
            lambda: sorted((iv.pod, iv.end is None) for iv in mine()) == [("a", False), ("b", True)],
        )
        core.delete_namespaced_pod("b", namespace, grace_period_seconds=0)
        wait_for("b closed", lambda: all(iv.end is not None for iv in mine()))
    finally:
        meter.close()
    assert sorted(iv.pod for iv in mine()) == ["a", "b"]  # one interval each: nothing doubled or lost
