"""Metering through database outages, with a REAL PostgreSQL server stopped and restarted: before this, a
database that was down when metering started killed metering for the life of the process, and pods that
started and stopped during an outage were never recorded. Now writes wait in a bounded on-disk spool and
reach the store after recovery, exactly once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from kgwe.cost.metering import Start
from kgwe.cost.metering_watch import MeteringWatch
from kgwe.cost.spool import Spool
from kgwe.cost.store import CostStore
from kgwe.cost.usage import Period, UsageInterval
from tests.harness.pods import gpu_pod
from tests.harness.postgres import PostgresServer
from tests.harness.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.postgres]


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A server of this test's own: stopping the session's would break other tests."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


def test_pods_during_outages_are_metered_after_recovery_exactly_once(
    k8s_api, namespace, gpu_node, own_postgres, tmp_path
) -> None:
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-H100")
    store = CostStore(own_postgres.url, connect_timeout_s=1)
    spool = Spool(tmp_path / "spool.jsonl")
    own_postgres.halt()  # down before metering starts (a replica becoming leader during an outage)
    watch = MeteringWatch(k8s_api, store, watch_timeout_s=1, spool=spool, max_backoff_s=1.0)
    stop = threading.Event()
    thread = threading.Thread(target=watch.run, args=(stop,), daemon=True)
    thread.start()

    def mine() -> dict[str, list[UsageInterval]]:
        now = datetime.now(UTC)
        try:
            rows = store.usage(Period(now - timedelta(days=1), now + timedelta(days=1)))
        except Exception:
            return {}
        out: dict[str, list[UsageInterval]] = {}
        for iv in rows:
            if iv.namespace == namespace:
                out.setdefault(iv.pod, []).append(iv)
        return out

    def running(name: str) -> bool:
        return core.read_namespaced_pod(name, namespace).status.phase == "Running"

    def spooled_starts() -> set[str]:
        return {w.interval.pod for w in spool.pending() if isinstance(w, Start)}

    try:
        wait_for("first list, store down", watch.synced.is_set)
        core.create_namespaced_pod(namespace, gpu_pod("a", node))
        wait_for("a running", lambda: running("a"))
        wait_for("a spooled", lambda: "a" in spooled_starts())
        assert thread.is_alive()

        own_postgres.resume()
        wait_for("a metered after recovery", lambda: "a" in mine() and not len(spool))

        own_postgres.halt()  # a second outage, mid-metering
        core.create_namespaced_pod(namespace, gpu_pod("b", node))
        wait_for("b running", lambda: running("b"))
        started = core.read_namespaced_pod("b", namespace).status.start_time or datetime.now(UTC)
        # the store keeps whole seconds: b holds its GPU for some
        wait_for("b to hold its GPU for 2 s", lambda: datetime.now(UTC) >= started + timedelta(seconds=2))
        core.delete_namespaced_pod("b", namespace, grace_period_seconds=0)
        wait_for(
            "b gone",
            lambda: not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "b"],
        )
        core.create_namespaced_pod(namespace, gpu_pod("c", node))
        wait_for("c running", lambda: running("c"))
        wait_for("b and c spooled", lambda: {"b", "c"} <= spooled_starts())
        own_postgres.resume()

        wait_for("b and c metered", lambda: {"a", "b", "c"} <= set(mine()) and not len(spool))
        wait_for("b closed", lambda: mine()["b"][0].end is not None)
        got = mine()
        assert {pod: len(ivs) for pod, ivs in got.items()} == {"a": 1, "b": 1, "c": 1}  # exactly once
        assert got["a"][0].end is None and got["c"][0].end is None
        b = got["b"][0]
        assert b.start < b.end <= datetime.now(UTC)
        assert watch.totals["dropped"] == 0
    finally:
        stop.set()
        thread.join(30)
        store.close()


def test_the_spool_is_bounded_and_counts_what_it_drops(tmp_path) -> None:
    from kgwe.cost.metering import End

    spool = Spool(tmp_path / "s.jsonl", max_records=3)
    at = datetime(2026, 11, 1, tzinfo=UTC)
    assert spool.append([End(f"uid-{i}", "whole", at) for i in range(5)]) == 2
    assert len(spool) == 3 and spool.dropped == 2
    assert [w.pod_uid for w in spool.pending()] == ["uid-0", "uid-1", "uid-2"]
    assert Spool(tmp_path / "s.jsonl", max_records=3).pending() == spool.pending()  # survives a restart
    spool.clear()
    assert not len(spool) and spool.pending() == []


def test_losing_the_lease_stops_metering_and_event_writes(k8s_api, namespace, gpu_node, tmp_path) -> None:
    """A replica that lost its lease must not write: metering stops at once, Events are not written, and
    metering starts again when it leads again."""
    from kgwe.cost.service import CostService
    from kgwe.reconcile.controller import Controller
    from kgwe.reconcile.costs import CostDuties

    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-H100")
    store = CostStore(f"sqlite:///{tmp_path / 'cost.db'}")
    store.migrate()
    service = CostService(store, cluster="t", spool_path=tmp_path / "spool.jsonl")
    duties = CostDuties(service)
    leading = [True]

    class Replica(Controller):
        def is_leader(self) -> bool:
            return leading[0]

    c = Replica(k8s_api, namespace, cache_dir=tmp_path, listen=None, leader_election=False, costs=duties)
    duties.start(k8s_api)
    try:
        wait_for("metering synced", lambda: service.watch.synced.is_set())
        leading[0] = False
        c._on_stopped()
        assert not service._thread.is_alive()
        core.create_namespaced_pod(namespace, gpu_pod("after-loss", node))
        wait_for(
            "pod running", lambda: core.read_namespaced_pod("after-loss", namespace).status.phase == "Running"
        )
        # nothing meters it: the metering thread has stopped (above), and nothing else writes usage
        assert [iv for iv in store.open_usage() if iv.namespace == namespace] == []
        c.recorder.record({"metadata": {"name": "x", "namespace": namespace}}, "Normal", "Test", "not leader")
        assert c.recorder.writes == 0
        leading[0] = True
        c._on_started()  # leading again: metering resumes and catches up with a relist
        wait_for(
            "pod metered",
            lambda: [iv.pod for iv in store.open_usage() if iv.namespace == namespace] == ["after-loss"],
        )
    finally:
        duties.stop()
        store.close()
