"""Lease-based leader election on the real apiserver: one leader, a deposed leader stops first."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client

from kgwe.cluster.lease import LeaderElector
from kgwe.errors import KgweError

pytestmark = pytest.mark.cluster

FAST = {"lease_duration_seconds": 2.0, "renew_deadline_seconds": 1.5, "retry_period_seconds": 0.2}


def elector(api, namespace, identity, **kw) -> LeaderElector:
    options = {**FAST, **kw}
    return LeaderElector(api, name="kgwe-controller", namespace=namespace, identity=identity, **options)


def test_exactly_one_leader_and_takeover_only_after_the_old_one_stops(k8s_api, namespace):
    a, b = elector(k8s_api, namespace, "a"), elector(k8s_api, namespace, "b")
    a.step()
    b.step()
    assert a.is_leader() and not b.is_leader()
    lease = client.CoordinationV1Api(k8s_api).read_namespaced_lease("kgwe-controller", namespace)
    assert lease.spec.holder_identity == "a"

    # `a` stops renewing (a crash, a network partition). `b` keeps trying; at the moment it wins,
    # `a` must already consider itself not leading.
    acquired = threading.Event()

    def campaign():
        while not b.try_acquire_or_renew():
            threading.Event().wait(0.1)
        acquired.set()

    threading.Thread(target=campaign, daemon=True).start()
    assert acquired.wait(20), "b never took over an expired lease"
    assert not a.is_leader(), "the old leader was still acting when the new one started"
    lease = client.CoordinationV1Api(k8s_api).read_namespaced_lease("kgwe-controller", namespace)
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1


def test_loss_fires_callback_and_release_hands_over(k8s_api, namespace):
    events: list[str] = []
    a = elector(
        k8s_api,
        namespace,
        "a",
        on_started_leading=lambda: events.append("a+"),
        on_stopped_leading=lambda: events.append("a-"),
    )
    b = elector(k8s_api, namespace, "b", on_started_leading=lambda: events.append("b+"))
    a.step()
    b.step()
    assert events == ["a+"]
    # Someone takes the lease away from `a` (e.g. an admin deletes it and another replica recreates it).
    api = client.CoordinationV1Api(k8s_api)
    api.delete_namespaced_lease("kgwe-controller", namespace)
    b.step()
    assert events == ["a+", "b+"]
    stop_at = threading.Event()
    while "a-" not in events and not stop_at.wait(0.2):
        a.step()
        b.step()
    assert events[-1] == "a-" and not a.is_leader() and b.is_leader()

    # A clean shutdown releases at once: the other replica does not wait a lease duration.
    b.release()
    assert a.try_acquire_or_renew()


def test_two_threads_running_never_both_lead(k8s_api, namespace):
    electors = [elector(k8s_api, namespace, f"r{i}") for i in range(2)]
    stop = threading.Event()
    both = []

    def watch_gates():
        while not stop.is_set():
            if all(e.is_leader() for e in electors):
                both.append(True)
            stop.wait(0.02)

    threads = [e.start(stop) for e in electors] + [threading.Thread(target=watch_gates, daemon=True)]
    threads[-1].start()
    stop.wait(3)
    leaders = [e.identity for e in electors if e.is_leader()]
    stop.set()
    for t in threads:
        t.join(timeout=5)
    assert len(leaders) == 1 and not both


def test_bad_timing_is_refused(k8s_api):
    with pytest.raises(KgweError):
        LeaderElector(
            k8s_api, name="x", namespace="y", identity="z", lease_duration_seconds=5, renew_deadline_seconds=6
        )


def test_an_unreachable_apiserver_closes_the_gate_without_killing_the_campaign(k8s_api, namespace):
    """A refused connection is a failed round: the leader stops acting after the deadline, the loop lives."""
    clock = [0.0]
    a = elector(k8s_api, namespace, "a", clock=lambda: clock[0])
    a.step()
    assert a.is_leader()
    gone = client.ApiClient(client.Configuration())
    gone.configuration.host = "https://127.0.0.1:1"  # nothing listens on port 1
    gone.configuration.retries = False
    a.api = client.CoordinationV1Api(gone)
    clock[0] = 2.0  # past the renew deadline
    a.step()  # raised urllib3's MaxRetryError before
    assert not a.is_leader()
    a.api = client.CoordinationV1Api(k8s_api)
    a.step()
    assert a.is_leader(), "the elector did not recover once the apiserver was back"
