"""The optimizer at admission on the real control plane (the workload tests' stack: API server, scheduler,
extender, the GPUWorkload reconciler): a workload that completes becomes a finished run of the runtime
model; the next one like it is admitted with status.prediction saying so; a GPUBudget with
predictedCostAdmission Hold keeps back the one whose expected cost exceeds what remains, creating nothing,
and the cost duties answer as the controller wires them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kgwe.cost.service import CostService
from kgwe.cost.store import CostStore
from kgwe.optimizer.service import OptimizerDuties
from kgwe.policy import load_repository
from kgwe.reconcile.costs import CostDuties
from tests.workloads.test_workloads_cluster import (  # the workload tests' stack and helpers
    BUDGET_POLICY,
    EXAMPLES,
    _bound,
    _cond,
    _create,
    _finish,
    _get,
    _pods,
    _tag,
    eventually,
    stack,  # noqa: F401  (a fixture)
)

pytestmark = pytest.mark.cluster

POLICY = {
    "pricing.yaml": BUDGET_POLICY["policy/pricing.yaml"],  # A100s at 2.50 an hour
    "budget.yaml": """apiVersion: kgwe.nvidia.io/v1
kind: GPUBudget
metadata: {name: ml-research}
spec:
  team: ml-research
  namespaces: [NAMESPACE]
  limit: {amount: "LIMIT", currency: USD}
  predictedCostAdmission: ACTION
""",
}


def policy(root: Path, namespace: str, limit: str, action: str = "Hold"):
    root.mkdir(parents=True, exist_ok=True)
    for name, text in POLICY.items():
        filled = text.replace("NAMESPACE", namespace).replace("LIMIT", limit).replace("ACTION", action)
        (root / name).write_text(filled)
    ps = load_repository(root)
    assert ps.ok, ps.errors
    return ps


def test_a_finished_workload_teaches_the_next_ones_prediction_and_a_hold_budget_keeps_back_the_dear_one(
    request, k8s_api, namespace, gpu_node, tmp_path
):
    parts = request.getfixturevalue("stack")
    tag = _tag()
    gpu_node("DGX-A100", labels=tag)
    store = CostStore(str(tmp_path / "cost.db"))
    store.migrate()
    duties = CostDuties(CostService(store, cluster="t"), refresh_seconds=0, optimizer=OptimizerDuties(store))
    roomy = policy(tmp_path / "roomy", namespace, "100000")
    duties.prices_in_force(roomy)  # what the controller does once a policy is in force
    duties.budget_caps("repo", roomy, [], lambda *event: None)
    reconciler = parts["reconciler"]
    reconciler.advise, reconciler.finished = duties.workload_admission, duties.workload_finished

    doc = yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text())
    doc["spec"]["gpuRequirements"]["product"] = "NVIDIA-A100-SXM4-80GB"
    first = dict(doc, metadata={"name": "first"})
    name = _create(k8s_api, namespace, first, tag, hold=True)
    wl = eventually(
        lambda: (
            _bound(k8s_api, namespace, name) and (w := _get(k8s_api, namespace, name)).get("status") and w
        ),
        "placed",
    )
    prediction = wl["status"]["prediction"]  # no finished run yet: the prior, said so
    assert prediction["fallback"].startswith("no finished run recorded yet")
    assert (
        prediction["cost"]["currency"] == "USD" and prediction["cost"]["product"] == "NVIDIA-A100-SXM4-80GB"
    )
    _finish(k8s_api, namespace, _bound(k8s_api, namespace, name)[0])
    eventually(lambda: _get(k8s_api, namespace, name)["status"].get("phase") == "Succeeded", "completed")
    assert duties.optimizer.models.run_count() == 1  # the finished hook recorded the run
    assert "runtime" in duties.optimizer.refit_due()

    second = dict(doc, metadata={"name": "second"})
    name = _create(k8s_api, namespace, second, tag, hold=True)
    wl = eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and _cond(w, "Admitted").get("status") == "True" and w,
        "admitted",
    )
    prediction = wl["status"]["prediction"]
    assert "fallback" not in prediction
    assert prediction["reason"] == (
        f"from 1 finished run of workload type Training in {namespace} shaped 1 x whole:8 (of 1 in all)"
    )
    assert prediction["durationSeconds"]["p50"] > 0 and float(prediction["cost"]["p90"]) >= 0

    # the budget's limit now a cent: what remains cannot pay for the next one, which is held, nothing created
    tight = policy(tmp_path / "tight", namespace, "0.01")
    duties.budget_caps("repo", tight, [], lambda *event: None)
    third = dict(doc, metadata={"name": "third"})
    name = _create(k8s_api, namespace, third, tag, hold=True)
    wl = eventually(
        lambda: (
            (w := _get(k8s_api, namespace, name))
            and _cond(w, "Admitted").get("reason") == "PredictedCostHeld"
            and w
        ),
        "held",
    )
    assert (
        "left of GPUBudget ml-research this period: held until the budget has room"
        in _cond(wl, "Admitted")["message"]
    )
    assert wl["status"]["phase"] == "Pending" and _pods(k8s_api, namespace, name) == []

    # Refuse instead of Hold: the next one fails for good (Failed, PredictedCostOverBudget), nothing created
    duties.budget_caps(
        "repo", policy(tmp_path / "refuse", namespace, "0.01", "Refuse"), [], lambda *event: None
    )
    name = _create(k8s_api, namespace, dict(doc, metadata={"name": "fourth"}), tag, hold=True)
    wl = eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and w.get("status", {}).get("phase") == "Failed" and w,
        "refused",
    )
    assert _cond(wl, "Failed")["reason"] == "PredictedCostOverBudget"
    assert "refused (spec.predictedCostAdmission: Refuse)" in _cond(wl, "Failed")["message"]
    assert _pods(k8s_api, namespace, name) == []
