"""The control loop on the in-memory cluster: watches queue keys (the primary source only when its view
changed, so a reconciler's own status writes do not), a standby reconciles nothing and a new leader looks at
every key, failures come back after a growing backoff, a success forgets them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kgwe.runtime.kinds import CONFIG_MAP, POD
from kgwe.runtime.leader import NotLeader
from kgwe.runtime.loop import DONE, RETRY, ControlLoop, Result, Source
from kgwe.runtime.memory import MemoryCluster
from kgwe.runtime.queue import Backoff, RateLimit, WorkQueue
from tests.harness.waiting import wait_for


class Leader:
    def __init__(self, leading: bool = True) -> None:
        self.leading = leading

    def __call__(self) -> bool:
        return self.leading


class Reconciler:
    """Records each key it is asked about; answers what the test sets per key."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.answers: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, key: str) -> Result:
        with self._lock:
            self.seen.append(key)
        answer = self.answers.get(key, DONE)
        if isinstance(answer, BaseException):
            raise type(answer)(*answer.args)  # a fresh one: a raised exception keeps growing its traceback
        return answer

    def count(self, key: str) -> int:
        with self._lock:
            return self.seen.count(key)


def cm(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns"},
        "data": data,
    }


def pod(name: str, owner: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "labels": {"owner": owner}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


@pytest.fixture
def running() -> Iterator[tuple[MemoryCluster, Reconciler, Leader, ControlLoop]]:
    cluster, rec, leader, stop = MemoryCluster(), Reconciler(), Leader(), threading.Event()
    queue = WorkQueue(backoff=Backoff(0.01, 0.05), limit=RateLimit(1000.0, 1000))
    sources = [
        Source(
            "configmaps",
            CONFIG_MAP,
            key=lambda o: o["metadata"]["name"],
            view=lambda o: o["metadata"]["generation"],
        ),
        Source("pods", POD, key=lambda o: (o["metadata"].get("labels") or {}).get("owner"), labels="owner"),
    ]
    loop = ControlLoop("test", cluster, rec, sources, gate=leader, queue=queue, workers=2)
    assert loop.queue is queue  # the one given, empty as it is
    loop.start(stop)
    yield cluster, rec, leader, loop
    stop.set()


def test_changes_queue_their_keys_and_status_writes_do_not(running):
    cluster, rec, _, loop = running
    cluster.create(cm("a", k="1"))
    wait_for("a reconciled", lambda: rec.count("a") >= 1)
    cluster.patch_status(CONFIG_MAP, "a", {"status": {"seen": True}}, "ns")  # the view (generation) holds
    cluster.create(pod("p", owner="a"))  # a child names its owner's key
    wait_for("a again for its pod", lambda: rec.count("a") >= 2)
    cluster.patch(CONFIG_MAP, "a", {"data": {"k": "2"}}, "ns")  # a new generation
    wait_for("a again for its edit", lambda: rec.count("a") >= 3)
    wait_for("the queue idle", loop.queue.idle)
    assert rec.count("a") == 3 and loop.reconciles == 3


def test_a_standby_reconciles_nothing_and_a_new_leader_looks_at_everything(running):
    cluster, rec, leader, loop = running
    leader.leading = False
    cluster.create(cm("a"))
    cluster.create(cm("b"))
    wait_for("both known", lambda: loop.known() == ["a", "b"])
    loop.process(0.0)  # nothing was queued while standing by
    assert rec.seen == []
    leader.leading = True
    wait_for("both reconciled", lambda: rec.count("a") and rec.count("b"))


def test_a_failure_is_retried_with_growing_backoff_and_a_success_forgets_it(running):
    cluster, rec, _, loop = running
    rec.answers["a"] = RuntimeError("the API server is away")
    cluster.create(cm("a"))
    wait_for("three failed tries", lambda: loop.queue.failures("a") >= 3)
    rec.answers["a"] = RETRY  # a failure the reconciler reports itself
    tries = rec.count("a")
    wait_for("a fourth try", lambda: rec.count("a") > tries)
    rec.answers["a"] = DONE
    wait_for("a success", lambda: loop.queue.failures("a") == 0)
    wait_for("the queue idle", loop.queue.idle)
    assert not loop.queue.pending("a")  # a success asks for nothing more


def test_a_lost_lease_mid_reconcile_drops_the_key_without_retry(running):
    cluster, rec, _, loop = running
    rec.answers["a"] = NotLeader("lost leadership")
    cluster.create(cm("a"))
    wait_for("a tried", lambda: rec.count("a") == 1)
    wait_for("the queue idle", loop.queue.idle)
    assert loop.queue.failures("a") == 0 and loop.reconciles == 0


def test_a_requeue_after_seconds_comes_back():
    cluster, rec = MemoryCluster(), Reconciler()
    rec.answers["a"] = Result(after_seconds=0.01)
    loop = ControlLoop("t", cluster, rec, [Source("cms", CONFIG_MAP, key=lambda o: o["metadata"]["name"])])
    loop.queue.add("a")
    assert loop.process(1.0) == "a"
    assert loop.process(5.0) == "a"  # asked for again after its delay
    assert rec.seen == ["a", "a"]


def test_after_stop_join_workers_waits_for_the_reconcile_running_and_no_longer():
    """The controller flushes what a pass leaves (its audit entries) only once no pass runs: join_workers
    says whether the passes running ended in the time given."""
    cluster, stop, entered, release = MemoryCluster(), threading.Event(), threading.Event(), threading.Event()
    finished: list[str] = []

    def slow(key: str) -> Result:
        entered.set()
        release.wait(30)
        finished.append(key)
        return DONE

    queue = WorkQueue(backoff=Backoff(0.01, 0.05), limit=RateLimit(1000.0, 1000))
    source = Source("configmaps", CONFIG_MAP, key=lambda o: o["metadata"]["name"])
    loop = ControlLoop("join", cluster, slow, [source], gate=Leader(), queue=queue, workers=2)
    loop.start(stop)
    cluster.create(cm("a"))
    wait_for("a pass running", entered.is_set)
    stop.set()
    try:
        assert not loop.join_workers(0.2)  # the pass still runs
        assert finished == []
    finally:
        release.set()
    assert loop.join_workers(30)
    assert finished == ["a"]
