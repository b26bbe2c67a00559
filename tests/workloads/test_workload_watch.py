"""The GPUWorkload controller's watches on a real API server: a re-watch resumes from the last
resourceVersion, so no existing object is handed over again as ADDED, and an expired version (410 Gone)
lists again and goes on."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from kgwe.cluster.events import EventRecorder
from kgwe.runtime.kube import KubeCluster
from kgwe.vocab import API_GROUP as GROUP
from kgwe.vocab import CRD_VERSION as VERSION
from kgwe.vocab import GPU_WORKLOAD_PLURAL as PLURAL
from kgwe.vocab import WORKLOADS_ENABLED, WORKLOADS_NAMESPACE_LABEL
from kgwe.workloads.controller import (
    WorkloadController,
    WorkloadMetrics,
    WorkloadReconciler,
)
from tests.harness.crds import install_crds
from tests.harness.deployed import eventually

pytestmark = pytest.mark.cluster

WATCH_SECONDS = 1  # the API server ends each watch after this long; the loop must resume it


def _workload(name: str) -> dict[str, Any]:
    """A suspended workload: the reconciler writes its status (MODIFIED events) and creates nothing."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUWorkload",
        "metadata": {"name": name},
        "spec": {
            "gpuRequirements": {"count": 1},
            "suspend": True,
            "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
        },
    }


class Watching:
    """The controller's watches running against the API server, read through its own metrics."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def events(self, kind: str) -> float:
        return self._sample("kgwe_gpuworkload_watch_events_total", {"type": kind}) or 0.0

    def listed(self) -> bool:
        return self._sample("kgwe_gpuworkload_watch_events_total", {"type": "LISTED"}) is not None

    def _sample(self, name: str, labels: dict[str, str]) -> float | None:
        return self.registry.get_sample_value(name, {"resource": "gpuworkloads", **labels})

    def restarts(self, reason: str) -> float:
        return self._sample("kgwe_gpuworkload_watch_restarts_total", {"reason": reason}) or 0.0


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


class Watches(KubeCluster):
    """The controller's cluster, counting the watches of GPUWorkloads it starts; `resume_from` rewrites the
    resourceVersion of the watch with that number (a version the API server no longer holds)."""

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(api)
        self.started = 0
        self.resume_from: dict[int, str] = {}

    def _request(self, method: str, path: str, *, query: Any = None, **kwargs: Any) -> Any:
        if query and query.get("watch") == "true" and path.endswith(f"/{PLURAL}"):
            self.started += 1
            if self.started in self.resume_from:
                query = {**query, "resourceVersion": self.resume_from[self.started]}
        return super()._request(method, path, query=query, **kwargs)


@pytest.fixture
def reconciler(k8s_api: client.ApiClient, registry: CollectorRegistry) -> WorkloadReconciler:
    install_crds(k8s_api)
    return WorkloadReconciler(
        Watches(k8s_api),
        recorder=EventRecorder(k8s_api),
        metrics=WorkloadMetrics(registry),
        is_leader=lambda: True,
    )


@pytest.fixture
def run_controller(
    reconciler: WorkloadReconciler, registry: CollectorRegistry
) -> Iterator[Callable[[], Watching]]:
    stop = threading.Event()

    def start() -> Watching:
        controller = WorkloadController(reconciler, resync_seconds=3600, watch_timeout_seconds=WATCH_SECONDS)
        controller.start(stop)
        return Watching(registry)

    yield start
    stop.set()


def _create(k8s_api: client.ApiClient, namespace: str, name: str) -> None:
    label = {"metadata": {"labels": {WORKLOADS_NAMESPACE_LABEL: WORKLOADS_ENABLED}}}
    client.CoreV1Api(k8s_api).patch_namespace(namespace, label)  # where GPUWorkloads may be created
    client.CustomObjectsApi(k8s_api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _workload(name)
    )


def test_a_rewatch_hands_over_no_object_again_as_added(k8s_api, namespace, reconciler, run_controller):
    watches = reconciler.cluster
    watching = run_controller()
    eventually(watching.listed, "the first listing")
    added_before = watching.events("ADDED")
    for i in range(3):
        _create(k8s_api, namespace, f"w{i}")
    eventually(lambda: watching.events("ADDED") - added_before == 3, "three ADDED events")
    eventually(lambda: watching.events("MODIFIED") >= 3, "the reconciler's status writes seen")
    # Several watches end and are resumed meanwhile (each after WATCH_SECONDS). Re-watching without the
    # last resourceVersion would hand the three workloads over again as ADDED after every one of them.
    started = watches.started
    eventually(lambda: watches.started >= started + 5, "five more watches of GPUWorkloads")
    assert watching.events("ADDED") - added_before == 3
    assert watching.restarts("expired") == 0 and watching.restarts("failed") == 0  # resumed, never relisted


def test_an_expired_version_lists_again_and_goes_on(k8s_api, namespace, reconciler, run_controller):
    # The API server answers a watch from a version it no longer holds with 410 Gone (the test cannot wait
    # minutes for a compaction): the second watch asks for version 1, long gone on this cluster.
    reconciler.cluster.resume_from[2] = "1"
    _create(k8s_api, namespace, "before")
    watching = run_controller()
    eventually(lambda: watching.restarts("expired") == 1, "the expiry seen")
    assert watching.restarts("failed") == 0  # a 410, answered by listing again at once, no pause
    listed = watching.events("LISTED")
    assert listed >= 2  # `before` in the first listing and again in the second
    added = watching.events("ADDED")
    _create(k8s_api, namespace, "after")
    eventually(lambda: watching.events("ADDED") == added + 1, "the workload created after the relist")
