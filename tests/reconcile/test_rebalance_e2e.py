"""Demand-driven MIG rebalancing on the real control plane: 20 pending 1g.10gb pods on an H100 pool laid out
for 3g.40gb. The real kube-scheduler (the rendered configuration, the real extender) marks them
unschedulable; within one rebalance interval the controller repartitions idle GPUs — never the node whose
GPU is held — the MIG manager stand-in applies the layout, and the pods schedule. When the demand then
vanishes the layout is held for the stabilization window (no flip-flop) and only then goes back.

The reconciler runs on a clock the test moves, so intervals and windows are minutes of policy without
minutes of waiting (nothing here asserts on time)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from kgwe.cli import main
from kgwe.localcluster.extender_process import start_extender
from kgwe.reconcile.repository import RepositoryReconciler
from tests.harness.deployed import eventually
from tests.harness.kgwe_scheduler import LocalScheduler, local_config, rendered_config_text
from tests.harness.processes import stop
from tests.harness.waiting import nodes_watched, repeat_until

pytestmark = pytest.mark.cluster

SYSTEM_NS = "kgwe-system"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"


REBALANCING = """    rebalanceInterval: 5m
    rebalanceMaxGPUs: 4
    rebalanceStabilizationWindow: 15m
"""


def mig_pod(name: str, profile: str, *, node: str | None = None, pool: str | None = None) -> dict:
    resources = {f"nvidia.com/mig-{profile}": "1"}
    spec: dict = {
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {"name": "c", "image": "busybox", "resources": {"limits": resources, "requests": resources}}
        ],
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["schedulerName"] = "kgwe-scheduler"
        spec["nodeSelector"] = {"kgwe.nvidia.io/pool": pool}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


class Clock:
    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.at

    def advance(self, minutes: float) -> None:
        self.at += timedelta(minutes=minutes)


def settle(rec: RepositoryReconciler, done, what: str, timeout: float = 120.0):
    """Reconcile until `done(outcome)` (the MIG manager stand-in works between passes)."""
    return repeat_until(what, rec.reconcile, done, timeout, watch=nodes_watched(rec.cluster))


def rebalance_events(core: client.CoreV1Api, pool: str) -> list[str]:
    events = core.list_namespaced_event(SYSTEM_NS, field_selector=f"involvedObject.name={pool}").items
    return [e.message for e in events if e.reason == "MIGRebalance"]


def test_pending_mig_pods_repartition_idle_gpus_and_vanished_demand_does_not_flip_flop(
    k8s_api, e2e, kgwe_mig_manager, control_plane, capsys
):
    core, pool, ns = e2e.core, e2e.pool, e2e.namespace
    busy, idle = e2e.make_nodes(2)
    strategy = e2e.strategy_yaml(pool, "3g.40gb: 100%", pending_timeout="1h", partition=REBALANCING)
    e2e.remote.commit({"policy/mig.yaml": strategy, "policy/scoring.yaml": e2e.SCORING})
    e2e.make_repository()
    clock = Clock()
    rec = RepositoryReconciler(k8s_api, SYSTEM_NS, pool, cache_dir=e2e.tmp / "cache", now=clock)

    # 1. the strategy's own layout: every GPU 2 x 3g.40gb
    settle(rec, lambda o: o is not None and o.phase == "ready", "pool laid out for 3g.40gb")
    laid_out = {n: e2e.labels(n)[MIG_CONFIG] for n in (busy, idle)}
    assert core.read_node(idle).status.allocatable.get("nvidia.com/mig-3g.40gb") == "16"
    assert "nvidia.com/mig-1g.10gb" not in core.read_node(idle).status.allocatable

    # 2. a workload holds a 3g.40gb instance on `busy`; 20 pods ask for 1g.10gb through the KGWE scheduler
    core.create_namespaced_pod(ns, mig_pod("holder", "3g.40gb", node=busy))
    eventually(lambda: core.read_namespaced_pod("holder", ns).status.phase == "Running", "holder running")
    proc, port = start_extender(control_plane.kubeconfig_path, "--namespace", ns)
    scheduler = None
    try:
        config = local_config(
            rendered_config_text("http://kgwe-extender.kgwe-system.svc:8080"),
            kubeconfig=control_plane.kubeconfig_path,
            extender_url=f"http://127.0.0.1:{port}",
            leader_elect=False,
        )
        scheduler = LocalScheduler(control_plane.binaries, control_plane.workdir / f"sched-{pool}", config)
        scheduler.start()
        for i in range(20):
            core.create_namespaced_pod(ns, mig_pod(f"small-{i}", "1g.10gb", pool=pool))

        def unschedulable() -> bool:
            pods = [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith("small-")]
            reasons = [c.reason for p in pods for c in p.status.conditions or [] if c.type == "PodScheduled"]
            return reasons.count("Unschedulable") == 20

        eventually(unschedulable, "the scheduler finds no node for the 1g.10gb pods", timeout=90)
        applies_before = list(kgwe_mig_manager.applies)

        # `kgwe plan --kubeconfig` previews the decision from the live pods before the controller takes it
        work, kubeconfig = str(e2e.remote.work), str(control_plane.kubeconfig_path)
        code = main(
            ["plan", "--repo", work, "--base", "HEAD", "--head", "HEAD", "policy", "--kubeconfig", kubeconfig]
        )
        preview = capsys.readouterr().out.split("### Next MIG rebalance", 1)[1]
        assert code == 0 and f"**{pool}**: 20 pending 1g.10gb pods; repartitioning" in preview, preview

        # 3. the next reconcile measures the new demand and decides at once; the idle node is repartitioned
        settle(
            rec, lambda o: (e2e.status().get("rebalance") or {}).get(pool, {}).get("epoch") == 1, "a decision"
        )
        record = e2e.status()["rebalance"][pool]
        assert record["target"] == {"1g.10gb": 20, "3g.40gb": 1}
        assert record["nodes"] == [idle]
        message = rebalance_events(core, pool)[0]
        assert re.fullmatch(
            rf"pool {pool}: 20 pending 1g\.10gb pods; repartitioning \d idle GPUs on {idle}"
            r" \(policy main@sha1:[0-9a-f]{40} by .+\)",  # the commit, and its author, it follows
            message,
        )
        settle(
            rec,
            lambda o: o is not None and o.phase == "ready" and e2e.labels(idle).get(MIG_STATE) == "success",
            "the rebalance rolled out",
        )
        assert e2e.labels(busy)[MIG_CONFIG] == laid_out[busy]  # the node with a workload is untouched
        assert e2e.labels(idle)[MIG_CONFIG] != laid_out[idle]
        assert [n for n, _ in kgwe_mig_manager.applies[len(applies_before) :]] == [idle]
        assert int(core.read_node(idle).status.allocatable["nvidia.com/mig-1g.10gb"]) >= 20

        def all_bound() -> bool:
            pods = [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith("small-")]
            return sum(1 for p in pods if p.spec.node_name == idle) == 20

        eventually(all_bound, "the 20 pods scheduled on the repartitioned node", timeout=120)
    finally:
        if scheduler is not None:
            scheduler.stop()
        stop(proc)

    # 4. demand vanishes: the layout holds for the 15-minute stabilization window, decided every 5 minutes
    for i in range(20):
        core.delete_namespaced_pod(f"small-{i}", ns, grace_period_seconds=0)
    eventually(
        lambda: not [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith("small-")],
        "the 1g.10gb pods gone",
    )
    rebalanced = e2e.labels(idle)[MIG_CONFIG]
    applies_before = list(kgwe_mig_manager.applies)
    for minutes in (5, 5):
        clock.advance(minutes)
        outcome = rec.reconcile()
        assert outcome is not None and outcome.phase == "ready", outcome
        record = e2e.status()["rebalance"][pool]
        assert record["epoch"] == 1 and record["target"]["1g.10gb"] == 20, record
        assert e2e.labels(idle)[MIG_CONFIG] == rebalanced
    assert kgwe_mig_manager.applies == applies_before  # no flip-flop within the window

    # 5. past the window the target falls and the idle node goes back towards the strategy's shares
    clock.advance(5)
    settle(rec, lambda o: e2e.status()["rebalance"][pool]["epoch"] == 2, "the release decision")
    assert any("demand fell for the whole stabilization window" in m for m in rebalance_events(core, pool))
    settle(
        rec,
        lambda o: o is not None and o.phase == "ready" and e2e.labels(idle).get(MIG_CONFIG) != rebalanced,
        "the idle node back on 3g.40gb",
    )
    assert e2e.labels(busy)[MIG_CONFIG] == laid_out[busy]


UTILIZATION = """    rebalanceInterval: 5m
    minUtilizationThreshold: 0.3
"""


def utilization_condition(status: dict) -> dict:
    return next(c for c in status.get("conditions") or [] if c["type"] == "UtilizationAvailable")


def test_idle_instances_measured_through_prometheus_are_not_demand_and_an_outage_degrades_to_allocation(
    k8s_api, e2e, kgwe_mig_manager, prometheus, tmp_path
):
    """A pod holding a 3g.40gb instance at 5% engine activity (a dcgm-exporter stand-in scraped by a real
    Prometheus) is not demand the pool must keep; with Prometheus gone every held instance counts again and
    UtilizationAvailable=False says why; without --prometheus the condition says it is not configured."""
    from kgwe.cost.prometheus import PrometheusClient
    from kgwe.reconcile.controller import activity_reader
    from tests.harness.dcgm import exposition, instance, serve_exporter

    core, pool, ns = e2e.core, e2e.pool, e2e.namespace
    (node,) = e2e.make_nodes(1)
    strategy = e2e.strategy_yaml(pool, "3g.40gb: 100%", pending_timeout="1h", partition=UTILIZATION)
    e2e.remote.commit({"policy/mig.yaml": strategy, "policy/scoring.yaml": e2e.SCORING})
    e2e.make_repository()
    clock = Clock()
    rec = RepositoryReconciler(k8s_api, SYSTEM_NS, pool, cache_dir=e2e.tmp / "cache", now=clock)
    settle(rec, lambda o: o is not None and o.phase == "ready", "pool laid out for 3g.40gb")
    core.create_namespaced_pod(ns, mig_pod("notebook", "3g.40gb", node=node))
    eventually(lambda: core.read_namespaced_pod("notebook", ns).status.phase == "Running", "notebook running")
    clock.advance(10)  # the pod has run for more than the measured interval

    def last_demand() -> dict:
        return e2e.status()["rebalance"][pool]["samples"][-1]["demand"]

    idle = exposition([(instance(1, "3g.40gb", (ns, "notebook")), 0.05)])
    with serve_exporter(lambda _: idle) as target, prometheus({"dcgm": target}, tmp_path / "p") as prom:
        eventually(lambda: prom.query('DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod="notebook"}'), "a scrape", 60)
        real = PrometheusClient(
            f"http://127.0.0.1:{prom.port}"
        )  # the clock is the test's; Prometheus's is real
        rec.read_activity = lambda start, end: real.pod_engine_activity(  # 1 s steps: a fresh Prometheus
            datetime.now(UTC) - (end - start), datetime.now(UTC), step_s=1
        )
        minute = timedelta(minutes=1)
        eventually(lambda: rec.read_activity(clock() - minute, clock()), "activity in a range query", 60)
        rec.reconcile()
        condition = utilization_condition(e2e.status())
        assert (condition["status"], condition["reason"]) == ("True", "Measured"), condition
        assert "1 held instance(s) below the threshold" in condition["message"]
        assert last_demand() == {}  # the idle notebook's instance is not demand

    clock.advance(5)
    rec.read_activity = activity_reader("http://127.0.0.1:9")  # nothing listens there
    rec.reconcile()
    condition = utilization_condition(e2e.status())
    assert (condition["status"], condition["reason"]) == ("False", "PrometheusUnavailable"), condition
    assert "http://127.0.0.1:9" in condition["message"] and "allocation only" in condition["message"]
    assert last_demand() == {"3g.40gb": 1}  # allocation only: the held instance counts
    warnings = core.list_namespaced_event(SYSTEM_NS, field_selector=f"involvedObject.name={pool}").items
    assert any(e.reason == "PrometheusUnavailable" and e.type == "Warning" for e in warnings)

    clock.advance(5)
    rec.read_activity = None
    rec.reconcile()
    assert utilization_condition(e2e.status())["reason"] == "NotConfigured"
