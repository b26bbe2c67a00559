"""The in-memory cluster keeps the API server's rules the reconcilers rely on: resourceVersions, conflicts,
generation, the status subresource, field managers, finalizers, owner references, selectors and watches that
resume where they stopped."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from kgwe.runtime import errors
from kgwe.runtime.kinds import CONFIG_MAP, GPU_WORKLOAD, JOB, POD, POD_GROUP
from kgwe.runtime.memory import MemoryCluster
from kgwe.vocab import FIELD_MANAGER
from tests.harness.waiting import wait_for


def cm(name: str, data: dict[str, str] | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}


def workload(name: str) -> dict[str, Any]:
    return {
        "apiVersion": GPU_WORKLOAD.api_version,
        "kind": "GPUWorkload",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"gpuRequirements": {"count": 1}},
        "status": {"phase": "Running"},
    }


def test_writes_move_the_resource_version_and_stale_writes_conflict():
    cluster = MemoryCluster()
    first = cluster.create(cm("a", {"k": "1"}))
    version = first["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as exists:
        cluster.create(cm("a"))
    assert errors.is_conflict(exists.value)
    second = cluster.patch(
        CONFIG_MAP, "a", {"data": {"k": "2"}, "metadata": {"resourceVersion": version}}, "ns"
    )
    assert int(second["metadata"]["resourceVersion"]) > int(version)
    with pytest.raises(ApiException) as stale:  # written since `version` was read
        cluster.patch(CONFIG_MAP, "a", {"data": {"k": "3"}, "metadata": {"resourceVersion": version}}, "ns")
    assert errors.is_conflict(stale.value)
    assert cluster.get(CONFIG_MAP, "a", "ns")["data"] == {"k": "2"}
    same = cluster.patch(CONFIG_MAP, "a", {"data": {"k": "2"}}, "ns")  # a no-op writes nothing
    assert same["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]
    assert cluster.get(CONFIG_MAP, "gone", "ns") is None
    with pytest.raises(ApiException) as missing:
        cluster.patch(CONFIG_MAP, "gone", {"data": {}}, "ns")
    assert errors.is_not_found(missing.value)


def test_status_is_written_only_through_its_subresource_and_generation_counts_the_spec():
    cluster = MemoryCluster()
    created = cluster.create(workload("w"))
    assert "status" not in created and created["metadata"]["generation"] == 1
    labelled = cluster.patch(
        GPU_WORKLOAD, "w", {"metadata": {"labels": {"a": "b"}}, "status": {"x": 1}}, "ns"
    )
    assert labelled["metadata"]["generation"] == 1 and "status" not in labelled
    written = cluster.patch_status(GPU_WORKLOAD, "w", {"status": {"phase": "Pending"}}, "ns")
    assert written["status"] == {"phase": "Pending"} and written["metadata"]["generation"] == 1
    assert {"manager": FIELD_MANAGER, "operation": "Update", "subresource": "status"} in written["metadata"][
        "managedFields"
    ]
    edited = cluster.apply({**workload("w"), "spec": {"gpuRequirements": {"count": 2}}})
    assert edited["metadata"]["generation"] == 2 and edited["status"] == {"phase": "Pending"}


def test_apply_merges_and_its_dry_run_writes_nothing():
    cluster = MemoryCluster()
    cluster.apply(cm("a", {"k": "1"}, team="ml"))
    preview = cluster.apply(cm("a", {"j": "2"}), dry_run=True)
    assert preview["data"] == {"k": "1", "j": "2"} and preview["metadata"]["labels"] == {"team": "ml"}
    assert cluster.get(CONFIG_MAP, "a", "ns")["data"] == {"k": "1"}
    assert [verb for verb, _ in cluster.writes] == ["apply"]


def test_deletes_wait_for_finalizers_and_take_owned_objects():
    cluster = MemoryCluster()
    job = cluster.create(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"}}
    )
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job["metadata"]["uid"]}]
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "ownerReferences": owner},
        }
    )
    held = cm("held")
    held["metadata"]["finalizers"] = ["example.com/cleanup"]
    cluster.create(held)
    assert cluster.delete(JOB, "j", "ns") and cluster.get(POD, "p", "ns") is None
    assert not cluster.delete(JOB, "j", "ns")  # gone already
    assert cluster.delete(CONFIG_MAP, "held", "ns")
    waiting = cluster.get(CONFIG_MAP, "held", "ns")
    assert waiting is not None and waiting["metadata"]["deletionTimestamp"]
    cluster.patch(CONFIG_MAP, "held", {"metadata": {"finalizers": None}}, "ns")
    assert cluster.get(CONFIG_MAP, "held", "ns") is None


def test_selectors_choose_as_the_api_server_does():
    cluster = MemoryCluster()
    cluster.create(cm("a", app="x", tier="web"))
    cluster.create(cm("b", app="y"))
    cluster.create(cm("c"))
    names = lambda **kw: [o["metadata"]["name"] for o in cluster.list(CONFIG_MAP, **kw)]  # noqa: E731
    assert names(labels="app=x") == ["a"]
    assert names(labels="app") == ["a", "b"] and names(labels="!app") == ["c"]
    assert names(labels="app in (x, y),tier!=web") == ["b"]
    assert names(labels="app notin (x)") == ["b", "c"]
    assert names(fields="metadata.name!=a") == ["b", "c"]
    assert names(fields="metadata.name=c", labels="!app") == ["c"]
    assert cluster.list(CONFIG_MAP, "elsewhere") == []


def test_faults_and_kinds_not_served_are_refused():
    cluster = MemoryCluster(served={CONFIG_MAP})
    cluster.fail("apply", CONFIG_MAP, "a", status=errors.INVALID)
    with pytest.raises(ApiException) as refused:
        cluster.apply(cm("a"))
    assert errors.is_invalid(refused.value) and "injected" in errors.message_of(refused.value)
    cluster.apply(cm("a"))  # once only
    with pytest.raises(errors.NotServed):
        cluster.get(POD_GROUP, "g", "ns")
    assert not cluster.serves("scheduling.k8s.io") and cluster.serves("")


class Recorded:
    def __init__(self) -> None:
        self.listings: list[list[str]] = []
        self.events: list[tuple[str, str]] = []
        self.restarts = 0

    def listed(self, items: Any) -> None:
        self.listings.append([o["metadata"]["name"] for o in items])

    def changed(self, event: str, obj: dict[str, Any]) -> None:
        self.events.append((event, obj["metadata"]["name"]))

    def restarted(self, error: BaseException | None) -> None:
        self.restarts += 1


@pytest.fixture
def watching() -> Iterator[tuple[MemoryCluster, Recorded]]:
    cluster, seen, stop = MemoryCluster(), Recorded(), threading.Event()
    cluster.create(cm("before", app="x"))
    thread = threading.Thread(
        target=cluster.watch,
        args=(CONFIG_MAP,),
        kwargs={
            "on_list": seen.listed,
            "on_event": seen.changed,
            "stop": stop,
            "labels": "app=x",
            "on_restart": seen.restarted,
        },
        daemon=True,
    )
    thread.start()
    wait_for("the first listing", lambda: seen.listings)
    yield cluster, seen
    stop.set()
    thread.join(10)
    assert not thread.is_alive()


def test_a_watch_tells_each_change_as_its_selector_sees_it(watching):
    cluster, seen = watching
    cluster.create(cm("new", app="x"))
    cluster.create(cm("other", app="y"))  # never in view
    cluster.patch(CONFIG_MAP, "new", {"data": {"k": "v"}}, "ns")
    cluster.patch(CONFIG_MAP, "other", {"metadata": {"labels": {"app": "x"}}}, "ns")  # comes into view
    cluster.patch(CONFIG_MAP, "before", {"metadata": {"labels": {"app": "z"}}}, "ns")  # leaves it
    cluster.delete(CONFIG_MAP, "new", "ns")
    want = [
        ("ADDED", "new"),
        ("MODIFIED", "new"),
        ("ADDED", "other"),
        ("DELETED", "before"),
        ("DELETED", "new"),
    ]
    wait_for("five events", lambda: len(seen.events) >= 5)
    assert seen.events == want and seen.listings == [["before"]]


def test_an_expired_watch_lists_again_and_goes_on(watching):
    cluster, seen = watching
    cluster.expire_watches()
    wait_for("the second listing", lambda: len(seen.listings) == 2)
    assert seen.restarts == 1
    cluster.create(cm("after", app="x"))
    wait_for("the object created after", lambda: ("ADDED", "after") in seen.events)
