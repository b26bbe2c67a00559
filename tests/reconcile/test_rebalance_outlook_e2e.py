"""MIG rebalancing ahead of demand on the real control plane: the cost store holds a day of metered 7g.80gb
demand on a pool laid out for 3g.40gb; the optimizer fits its outlook, and the controller prepares the idle
node for 7g.80gb before any pod asks — never the node whose GPU is held — and the MIG manager stand-in
applies it. Without the optimizer, the same pass decides nothing (no pending pod: today's rule)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kgwe.cost.service import CostService
from kgwe.cost.store import CostStore
from kgwe.cost.usage import UsageInterval
from kgwe.optimizer.service import OptimizerDuties
from kgwe.reconcile.costs import CostDuties
from kgwe.reconcile.repository import RepositoryReconciler
from tests.harness.deployed import eventually
from tests.harness.waiting import nodes_watched, repeat_until
from tests.reconcile.test_rebalance_e2e import MIG_CONFIG, MIG_STATE, SYSTEM_NS, mig_pod

pytestmark = pytest.mark.cluster

REBALANCING = """    rebalanceInterval: 5m
    rebalanceMaxGPUs: 8
"""


def metered_demand(store: CostStore, now: datetime) -> None:
    """A day of 7g.80gb instances held on some other node of the cluster: 4 at a time, an hour each."""
    store.add_usage(
        UsageInterval(
            pod=f"serve-{h}-{i}",
            namespace="serving",
            team="t",
            node="elsewhere",
            gpu_product="NVIDIA-H100-80GB-HBM3",
            kind="mig",
            count=1,
            start=now - timedelta(hours=24 - h),
            end=now - timedelta(hours=23 - h),
            mig_profile="7g.80gb",
            pod_uid=f"serve-{h}-{i}",
        )
        for h in range(24)
        for i in range(4)
    )


def test_an_idle_node_is_prepared_for_the_demand_expected_before_any_pod_asks(
    k8s_api, e2e, kgwe_mig_manager, tmp_path
):
    core, pool, ns = e2e.core, e2e.pool, e2e.namespace
    busy, idle = e2e.make_nodes(2)
    strategy = e2e.strategy_yaml(pool, "3g.40gb: 100%", pending_timeout="1h", partition=REBALANCING)
    e2e.remote.commit({"policy/mig.yaml": strategy, "policy/scoring.yaml": e2e.SCORING})
    e2e.make_repository()
    clock = [datetime.now(UTC)]
    store = CostStore(str(tmp_path / "cost.db"))
    store.migrate()
    metered_demand(store, clock[0])
    optimizer = OptimizerDuties(store, now=lambda: clock[0])
    duties = CostDuties(CostService(store, cluster="t"), now=lambda: clock[0], optimizer=optimizer)
    rec = RepositoryReconciler(k8s_api, SYSTEM_NS, pool, cache_dir=e2e.tmp / "cache", now=lambda: clock[0])

    def settle(done, what: str):
        return repeat_until(what, rec.reconcile, done, 120.0, watch=nodes_watched(rec.cluster))

    # 1. the strategy's own layout, then a workload on `busy`; without the optimizer nothing more happens
    settle(lambda o: o is not None and o.phase == "ready", "pool laid out for 3g.40gb")
    laid_out = {n: e2e.labels(n)[MIG_CONFIG] for n in (busy, idle)}
    core.create_namespaced_pod(ns, mig_pod("holder", "3g.40gb", node=busy))
    eventually(lambda: core.read_namespaced_pod("holder", ns).status.phase == "Running", "holder running")
    outcome = rec.reconcile()
    assert outcome is not None and outcome.phase == "ready"
    assert (e2e.status().get("rebalance") or {}).get(pool, {}).get("epoch") == 0
    assert e2e.labels(idle)[MIG_CONFIG] == laid_out[idle]

    # 2. the optimizer fits the day of metered demand; at its next evaluation (a rebalance interval on) the
    # controller prepares the idle node
    assert "mig-demand" in optimizer.refit_due()
    rec.mig_outlooks = duties.mig_outlooks  # as the controller wires it
    clock[0] += timedelta(minutes=5)
    applies_before = list(kgwe_mig_manager.applies)
    settle(lambda o: (e2e.status().get("rebalance") or {}).get(pool, {}).get("epoch") == 1, "a decision")
    record = e2e.status()["rebalance"][pool]
    assert record["nodes"] == [idle] and record["pending"] == {}, record
    assert record["message"].startswith("preparing for the demand expected (7g.80gb ")
    assert "of measured MIG demand" in record["message"]

    def prepared(o) -> bool:
        labels = e2e.labels(idle)
        changed = labels.get(MIG_CONFIG) != laid_out[idle] and labels.get(MIG_STATE) == "success"
        return o is not None and o.phase == "ready" and changed

    settle(prepared, "the preparation rolled out")
    assert e2e.labels(busy)[MIG_CONFIG] == laid_out[busy]  # the node with a workload is untouched
    assert [n for n, _ in kgwe_mig_manager.applies[len(applies_before) :]] == [idle]
    assert int(core.read_node(idle).status.allocatable.get("nvidia.com/mig-7g.80gb", "0")) == 8
