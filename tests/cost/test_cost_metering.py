"""Metering: events -> intervals, restarts reconcile without double counting or losing open intervals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kgwe.cost.metering import End, Meter, NodeInfo, Skip, Start, apply, holdings, node_info
from kgwe.cost.store import CostStore
from kgwe.cost.usage import Period

H100 = "NVIDIA-H100-80GB-HBM3"
T0 = datetime(2026, 10, 1, tzinfo=UTC)
NODES = {"gpu-0": NodeInfo("gpu-0", H100, 8, False), "gpu-1": NodeInfo("gpu-1", H100, 8, True)}


def pod(
    name,
    resources,
    *,
    node="gpu-0",
    phase="Running",
    annotations=None,
    labels=None,
    start_h=0.0,
    init=None,
    finished_h=None,
):
    status = {"phase": phase, "startTime": (T0 + timedelta(hours=start_h)).isoformat()}
    if finished_h is not None:
        status["containerStatuses"] = [
            {
                "state": {
                    "terminated": {
                        "finishedAt": (T0 + timedelta(hours=finished_h)).isoformat().replace("+00:00", "Z")
                    }
                }
            }
        ]
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"limits": resources}}],
            "initContainers": [{"resources": {"limits": init}}] if init else [],
        },
        "status": status,
    }


def test_resources_become_holdings():
    held, err = holdings(pod("a", {"nvidia.com/gpu": "2", "cpu": "4"}, init={"nvidia.com/gpu": "4"}))
    assert err is None and [(h.kind, h.count) for h in held] == [("whole", 4)]
    held, _ = holdings(pod("b", {"nvidia.com/mig-3g.40gb": 2}))
    assert [(h.kind, h.mig_profile, h.count) for h in held] == [("mig", "3g.40gb", 2)]
    shared = pod("c", {"nvidia.com/gpu.shared": 1}, annotations={"kgwe.nvidia.io/gpu-milli": "250"})
    held, _ = holdings(shared)
    assert [(h.kind, h.gpu_milli) for h in held] == [("shared", 250)]


def test_unreadable_resources_and_unknown_nodes_are_skipped_with_a_reason():
    """(A pod's annotations never make it skipped: tests/security/test_metering_self_report.py.)"""
    meter = Meter(NODES)
    cases = [
        pod("d", {"nvidia.com/gpu": "1.5"}),
        pod("f", {"nvidia.com/gpu": 1}, node="cpu-node"),
    ]
    for p in cases:
        [action] = meter.observe("ADDED", p, T0)
        assert isinstance(action, Skip) and action.reason, p["metadata"]["name"]


def test_a_pod_that_ran_while_no_leader_could_record_it_is_recorded_once_with_its_real_times(store):
    """A pod that started and finished while its writes sat in a replaced replica's spool (an upgrade with
    the cost store down) is still listed: the next reconcile that can ask the store records it, closed,
    once; a finished pod the store saw is never recorded again."""
    meter = Meter(NODES)
    seen = pod("seen", {"nvidia.com/gpu": 1}, start_h=0)
    apply(store, meter.observe("ADDED", seen, T0 + timedelta(hours=1)))
    seen_done = pod("seen", {"nvidia.com/gpu": 1}, phase="Succeeded", start_h=0, finished_h=2)
    apply(store, meter.observe("MODIFIED", seen_done, T0 + timedelta(hours=2)))
    missed = pod("missed", {"nvidia.com/mig-3g.40gb": 2}, phase="Succeeded", start_h=3, finished_h=4)
    never_ran = pod("never", {"nvidia.com/gpu": 1}, node="", phase="Failed")
    listed, now = [seen_done, missed, never_ran], T0 + timedelta(hours=6)
    restarted = Meter(NODES)
    # without knowing what the store saw (it is down), finished pods are left for a later listing
    assert restarted.reconcile(store.open_usage(), listed, now) == []
    uids = {"uid-seen", "uid-missed", "uid-never"}
    counts = apply(store, restarted.reconcile(store.open_usage(), listed, now, store.recorded_pods(uids)))
    assert counts["started"] == 1 and counts["ended"] == 0
    again = restarted.reconcile(store.open_usage(), listed, now, store.recorded_pods(uids))
    assert again == [], "recorded once, never again"
    by_pod = {iv.pod: iv for iv in store.usage(Period(T0, now))}
    assert sorted(by_pod) == ["missed", "seen"]
    assert (by_pod["missed"].start, by_pod["missed"].end) == (
        T0 + timedelta(hours=3),
        T0 + timedelta(hours=4),
    )
    assert by_pod["missed"].mig_profile == "3g.40gb" and by_pod["missed"].count == 2


def test_pod_lifecycle_events():
    meter = Meter(NODES)
    pending = pod("a", {"nvidia.com/gpu": 2}, node="", phase="Pending")
    assert meter.observe("ADDED", pending, T0) == []
    [start] = meter.observe("MODIFIED", pod("a", {"nvidia.com/gpu": 2}, node="gpu-1", start_h=1), T0)
    assert isinstance(start, Start) and start.interval.spot and start.interval.count == 2
    done = pod("a", {"nvidia.com/gpu": 2}, node="gpu-1", phase="Succeeded", finished_h=3)
    [end] = meter.observe("MODIFIED", done, T0 + timedelta(hours=5))
    assert isinstance(end, End) and end.at == T0 + timedelta(hours=3)


def test_restart_reconciles_without_loss_or_double_count(store, tmp_path):
    meter = Meter(NODES)
    a = pod("a", {"nvidia.com/gpu": 1}, start_h=0)
    b = pod("b", {"nvidia.com/mig-1g.10gb": 3}, start_h=1)
    c = pod("c", {"nvidia.com/gpu": 4}, start_h=2)
    for p in (a, b, c):
        apply(store, meter.observe("ADDED", p, T0 + timedelta(hours=2)))
    # the watch replays an event it already delivered: no second interval
    assert apply(store, meter.observe("MODIFIED", a, T0 + timedelta(hours=3)))["duplicates"] == 1

    # "crash" at 4h; while down, b finished at 5h and is still listed; c vanished; d started at 6h.
    restarted = Meter(NODES)
    b_done = pod("b", {"nvidia.com/mig-1g.10gb": 3}, phase="Succeeded", start_h=1, finished_h=5)
    d = pod("d", {"nvidia.com/gpu": 1}, start_h=6)
    now = T0 + timedelta(hours=8)
    counts = apply(store, restarted.reconcile(store.open_usage(), [a, b_done, d], now))
    assert counts == {"started": 1, "ended": 2, "skipped": 0, "duplicates": 0}
    # a second reconcile (e.g. after a watch gap) changes nothing
    assert apply(store, restarted.reconcile(store.open_usage(), [a, b_done, d], now))["started"] == 0

    by_pod = {iv.pod: iv for iv in store.usage(Period(T0, T0 + timedelta(days=1)))}
    assert sorted(by_pod) == ["a", "b", "c", "d"] and len(store.usage(Period(T0, now))) == 4
    assert by_pod["a"].end is None and by_pod["d"].end is None
    assert by_pod["b"].end == T0 + timedelta(hours=5)
    assert by_pod["c"].end == now  # vanished while we were down: charged until we noticed


def test_node_info_from_labels():
    node = {
        "metadata": {
            "name": "n",
            "labels": {
                "nvidia.com/gpu.product": H100,
                "nvidia.com/gpu.count": "8",
                "karpenter.sh/capacity-type": "spot",
            },
        },
        "status": {"capacity": {"nvidia.com/gpu": "0"}},
    }
    info = node_info(node, lambda labels: labels.get("karpenter.sh/capacity-type") == "spot")
    assert info == NodeInfo("n", H100, 8, True)
    assert node_info({"metadata": {"name": "cpu", "labels": {}}}, lambda _: False) is None


def test_store_survives_reopen(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    first = CostStore(url)
    first.migrate()
    apply(first, Meter(NODES).observe("ADDED", pod("a", {"nvidia.com/gpu": 1}), T0))
    first.close()
    second = CostStore(url)
    second.migrate()
    assert [iv.pod for iv in second.open_usage()] == ["a"]
