"""The controller's cost duties on the real control plane: a pod holding a GPU is metered, its budget
(Enforce) caps the namespace's quota through the normal apply path in the very pass that finds the budget
exhausted, the cap lifts in the next period, and cost reports land as a commit in the policy repository on
the reports schedule."""

from __future__ import annotations

import json
import subprocess
import threading
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from kgwe.cost.service import CostService
from kgwe.cost.store import CostStore
from kgwe.optimizer.service import OptimizerDuties
from kgwe.reconcile.costs import CostDuties
from kgwe.reconcile.repository import RepositoryReconciler
from kgwe.vocab import REVISION_ANNOTATION, REVISION_AUTHOR_ANNOTATION
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster

PRICING = """apiVersion: kgwe.nvidia.io/v1
kind: PricingCatalog
metadata: {name: default}
spec:
  currency: USD
  gpus:
    - {product: NVIDIA-H100-80GB-HBM3, onDemandPerHour: "4.10"}
"""


def budget(namespace: str) -> str:
    return f"""apiVersion: kgwe.nvidia.io/v1
kind: GPUBudget
metadata: {{name: tiny}}
spec:
  team: tiny-team
  namespaces: [{namespace}]
  period: Monthly
  limit: {{amount: "1", currency: USD}}
  quota: {{nvidia.com/gpu: 8}}
  alerts: [{{at: 50%}}, {{at: 100%, action: Enforce}}]
"""


def test_metering_enforce_cap_and_scheduled_reports(k8s_api, e2e, kgwe_mig_manager, tmp_path):
    (node,) = e2e.make_nodes(1)
    policy = {
        **e2e.base,
        # the node's whole GPUs stay (no MIG layout for it), whenever the pod comes
        "policy/mig.yaml": e2e.strategy_yaml(f"{e2e.pool}-other"),
        "policy/pricing.yaml": PRICING,
        "policy/budget.yaml": budget(e2e.namespace),
    }
    first = e2e.remote.commit(policy)
    e2e.make_repository(reports={"path": "reports/e2e", "schedule": "*/5 * * * *"})
    clock = {"now": datetime.now(UTC)}
    store = CostStore(str(tmp_path / "cost.db"))
    store.migrate()
    optimizer = OptimizerDuties(store, now=lambda: clock["now"])  # as cost_duties() makes them
    duties = CostDuties(
        CostService(store, cluster="e2e"), refresh_seconds=0, now=lambda: clock["now"], optimizer=optimizer
    )
    rec = RepositoryReconciler(
        k8s_api, "kgwe-system", e2e.pool, cache_dir=tmp_path / "cache", budget_caps=duties.budget_caps
    )
    core = client.CoreV1Api(k8s_api)

    def reconcile() -> None:  # one controller pass over the repository: reconcile, then the cost duties
        rec.reconcile()
        duties.after_reconcile(rec.view(e2e.obj()))

    def quota_gpus() -> str | None:
        try:
            quota = core.read_namespaced_resource_quota("kgwe-budget", e2e.namespace)
            return quota.spec.hard["requests.nvidia.com/gpu"]
        except client.ApiException:
            return None

    duties.start(k8s_api)
    try:
        reconcile()
        assert quota_gpus() == "8"
        core.create_namespaced_pod(
            e2e.namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name="trainer"),  # billed to the budget claiming its namespace
                spec=client.V1PodSpec(
                    node_selector={"kubernetes.io/hostname": node},
                    tolerations=[client.V1Toleration(operator="Exists")],
                    containers=[
                        client.V1Container(
                            name="c",
                            image="train:1",
                            resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                        )
                    ],
                ),
            ),
        )
        wait_for(
            "the pod to run",
            lambda: core.read_namespaced_pod("trainer", e2e.namespace).status.phase == "Running",
        )
        wait_for("the pod to be metered", lambda: bool(store.open_usage()))

        # An hour of an H100 at $4.10 exhausts the $1 budget: Enforce caps the quota at current use (1 GPU).
        clock["now"] += timedelta(hours=1)
        reconcile()  # the pass that finds the budget exhausted applies the cap (no interval of lag)
        assert quota_gpus() == "1"
        # the capped quota names the policy commit in force; the audit log says it was capped
        quota = core.read_namespaced_resource_quota("kgwe-budget", e2e.namespace)
        assert quota.metadata.annotations[REVISION_ANNOTATION] == f"main@sha1:{first}"
        assert quota.metadata.annotations[REVISION_AUTHOR_ANNOTATION] == "Human <h@x>"
        audited = [json.loads(e.line()) for e in rec.audit.entries] + _audit_lines(e2e)
        capped = [q for e in audited for q in e.get("budgetQuotas", {}).get("names", []) if q["capped"]]
        assert [q["namespace"] for q in capped] == [e2e.namespace]
        assert capped[0]["hard"]["requests.nvidia.com/gpu"] == "1"
        reconcile()
        assert quota_gpus() == "1", "the cap must hold across reconciles (no flapping with the render)"

        # Reports: first sight waits for the next fire, which the clock then passes.
        before = _log(e2e)
        clock["now"] += timedelta(minutes=6)
        reconcile()
        files = _tree(e2e)
        assert any(f.startswith("reports/e2e/") and "chargeback" in f for f in files), files
        assert "reports/e2e/demand-record.json" in files, files  # beside the inventory snapshot
        assert {"reports/e2e/predictions.md", "reports/e2e/models/runtime.json"} <= set(files), files
        assert _log(e2e) != before

        # Next period, pod gone: spend starts from zero, the cap lifts.
        core.delete_namespaced_pod("trainer", e2e.namespace, grace_period_seconds=0)
        wait_for("the interval to close", lambda: not store.open_usage())
        now = clock["now"]
        clock["now"] = (now.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1, hour=1)
        reconcile()
        assert quota_gpus() == "8"
    finally:
        duties.stop()


def _git(e2e, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=e2e.remote.bare, check=True, capture_output=True, text=True
    ).stdout


def _tree(e2e) -> list[str]:
    return _git(e2e, "ls-tree", "-r", "--name-only", "main").split()


def _audit_lines(e2e) -> list[dict]:
    """Every entry of the audit logs committed so far."""
    files = [f for f in _tree(e2e) if f.startswith("reports/e2e/audit/")]
    return [json.loads(line) for f in files for line in _git(e2e, "show", f"main:{f}").splitlines()]


def _log(e2e) -> str:
    return _git(e2e, "log", "--format=%H %an %s", "main")


def test_a_restarted_controller_prices_workloads_before_its_first_pass_converges(k8s_api, e2e, tmp_path):
    """A GPUWorkload's cost does not wait for a whole policy reconcile: once the validate step has loaded
    the applied revision (in force), the cost duties have its prices and every workload the controller's
    watch knows is looked at again. The workload here has finished, its status as the controller leaves it:
    nothing else brings it back before the resync period (an hour here), so it is costed only through that
    requeue."""
    from kgwe.reconcile.controller import Controller

    e2e.make_nodes(1)
    e2e.remote.commit({**e2e.base, "policy/pricing.yaml": PRICING})
    e2e.make_repository()
    first = RepositoryReconciler(k8s_api, "kgwe-system", e2e.pool, cache_dir=tmp_path / "before")
    assert first.reconcile().applied_revision  # what a controller before the restart applied
    workload = {
        "apiVersion": "kgwe.nvidia.io/v1",
        "kind": "GPUWorkload",
        "metadata": {"name": "chat", "namespace": e2e.namespace},
        "spec": {
            "gpuRequirements": {"count": 1},
            "workloadType": "Inference",
            "roles": [{"name": "server", "replicas": 1}],
            "podTemplate": {"spec": {"containers": [{"name": "c", "image": "serve:1"}]}},
        },
    }
    custom = client.CustomObjectsApi(k8s_api)
    custom.create_namespaced_custom_object("kgwe.nvidia.io", "v1", e2e.namespace, "gpuworkloads", workload)
    done = {"type": "Complete", "status": "True", "reason": "Succeeded", "message": "finished"}
    finished = {"conditions": [done], "phase": "Succeeded", "observedGeneration": 1}  # nothing to write
    custom.patch_namespaced_custom_object_status(
        "kgwe.nvidia.io", "v1", e2e.namespace, "gpuworkloads", "chat", {"status": finished}
    )
    store = CostStore(str(tmp_path / "cost.db"))
    store.migrate()
    applied_when_priced: list[object] = []
    costed_with_prices: list[bool] = []  # each look at the workload's cost: were prices known?

    class Watched(CostDuties):
        def prices_in_force(self, policy):
            applied_when_priced.append(controller._reconciler(e2e.pool).last_sync)
            return super().prices_in_force(policy)

        def workload_cost(self, namespace, name, obj):
            costed_with_prices.append(self.book is not None)
            return super().workload_cost(namespace, name, obj)

    def cost() -> dict | None:
        obj = custom.get_namespaced_custom_object(
            "kgwe.nvidia.io", "v1", e2e.namespace, "gpuworkloads", "chat"
        )
        return (obj.get("status") or {}).get("cost")

    duties = Watched(CostService(store, cluster="e2e"))
    controller = Controller(
        k8s_api,
        "kgwe-system",
        cache_dir=tmp_path / "after",
        costs=duties,
        listen=None,
        leader_election=False,
    )
    assert duties.book is None  # a fresh controller knows no prices
    workloads = controller.workloads
    assert workloads is not None
    workloads.resync_seconds = 3600.0
    stop = threading.Event()
    workloads.start(stop)
    try:
        # looked at once per event the watch saw (its list, and the status patch if that arrived after)
        wait_for("the workload looked at", lambda: len(costed_with_prices) >= 1)
        assert not any(costed_with_prices) and cost() is None  # without prices
        seen = len(costed_with_prices)
        controller.repositories.reconcile(e2e.pool)
        assert applied_when_priced[0] is None  # priced before this pass applied anything
        assert duties.book is not None and duties.book.currency == "USD"
        wait_for("the workload looked at again, with prices", lambda: any(costed_with_prices[seen:]))
        wait_for("its cost in its status", lambda: cost() is not None)
        assert cost()["currency"] == "USD"
    finally:
        stop.set()
