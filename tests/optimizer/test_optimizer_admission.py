"""Runtime and cost at admission: a GPUWorkload's groups, its expected cost and P90 at the catalog's price,
a budget that holds or refuses it, and the cost duties that answer the workload controller."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import yaml

from kgwe.cost.budgets import BudgetSpec, BudgetStatus
from kgwe.cost.pricing import pricebook
from kgwe.cost.service import CostService
from kgwe.cost.store import CostStore
from kgwe.cost.usage import Period
from kgwe.optimizer import admission
from kgwe.optimizer.admission import BudgetRoom, budget_decision, predict, predict_cost, shape_of
from kgwe.optimizer.prediction import Prediction
from kgwe.optimizer.service import OptimizerDuties
from kgwe.policy.budget import GPUBudgetSpec
from kgwe.reconcile.costs import CostDuties, budget_rooms
from kgwe.resources import workload_examples_dir
from kgwe.vocab import PREDICTED_COST_ADMISSION

T = datetime(2026, 5, 1, tzinfo=UTC)
BOOK = pricebook(
    [
        {"product": "NVIDIA-H100-80GB-HBM3", "onDemandPerHour": "4.10"},
        {"product": "NVIDIA-A100-SXM4-80GB", "onDemandPerHour": "2.45"},
    ]
)


def readme_workload(**spec) -> dict:
    doc = yaml.safe_load((workload_examples_dir() / "kgwe-readme-llm-training.yaml").read_text())
    doc["metadata"]["uid"] = "u-1"
    if "runtime" in spec:  # the runtime brings the containers
        doc["spec"]["podTemplate"] = {}
    doc["spec"].update(spec)
    return doc


def hours(h: float) -> Prediction:
    s = h * 3600
    return Prediction.make("duration_seconds", s, {0.1: s, 0.5: s, 0.9: s})


def test_a_workload_is_grouped_by_runtime_namespace_and_shape():
    shape = shape_of(readme_workload())
    assert shape.keys() == (
        ("workload type Training",),
        ("workload type Training", "ml-team"),
        ("workload type Training", "ml-team", "1 x whole:8"),
    )
    named = shape_of(readme_workload(runtime="torch-distributed"))
    assert named.kind == "runtime torch-distributed"


def test_cost_is_gpus_times_duration_times_the_named_products_price():
    shape = shape_of(readme_workload(gpuRequirements={"count": 8, "product": "NVIDIA-A100-SXM4-80GB"}))
    cost = predict_cost(shape, hours(2), BOOK)
    assert (cost.expected, cost.p90, cost.product, cost.note) == (
        Decimal("39.20"),
        Decimal("39.20"),
        "NVIDIA-A100-SXM4-80GB",
        "",
    )


def test_without_a_product_the_catalogs_dearest_is_priced_and_said():
    cost = predict_cost(shape_of(readme_workload()), hours(1), BOOK)
    assert cost.expected == Decimal("32.80") and cost.product == "NVIDIA-H100-80GB-HBM3"
    assert "no product: priced at the dearest product of the catalog" in cost.note
    assert predict_cost(shape_of(readme_workload()), hours(1), pricebook([])) is None


def test_a_mig_instance_costs_its_slices():
    doc = readme_workload(
        gpuRequirements={"count": 1, "migProfile": "3g.40gb", "product": "NVIDIA-H100-80GB-HBM3"}
    )
    del doc["spec"]["distributedConfig"]  # one pod (a world of 8 would be 8 pods of one instance)
    cost = predict_cost(shape_of(doc), hours(7), BOOK)
    assert cost.expected == Decimal("12.30")  # 3/7 of a GPU for 7 h at 4.10


def room(action: str, remaining: str = "50", currency: str = "USD") -> BudgetRoom:
    return BudgetRoom("ml-research", Decimal(remaining), currency, action)


@pytest.mark.parametrize(
    ("action", "remaining", "currency", "expected"),
    [
        ("Off", "1", "USD", None),
        ("Hold", "100", "USD", None),  # room enough
        ("Hold", "1", "EUR", None),  # another currency: not comparable, admitted as today
        ("Hold", "1", "USD", ("Hold", "PredictedCostHeld")),
        ("Refuse", "-3", "USD", ("Refuse", "PredictedCostOverBudget")),
    ],
)
def test_a_budget_holds_or_refuses_only_when_asked_and_over(action, remaining, currency, expected):
    cost = predict_cost(shape_of(readme_workload()), hours(1), BOOK)
    decision = budget_decision(cost, room(action, remaining, currency))
    assert (decision[:2] if decision else None) == expected
    if decision:
        assert "expected cost 32.80 USD (P90 32.80)" in decision[2] and "GPUBudget ml-research" in decision[2]
    assert budget_decision(None, room("Hold", "0")) is None  # no price: no decision
    assert budget_decision(cost, None) is None  # no budget over the namespace


def test_the_budget_field_is_off_by_default_and_one_word_list():
    spec = GPUBudgetSpec.model_validate({"team": "t", "namespaces": ["a"], "limit": {"amount": "1"}})
    assert spec.predicted_cost_admission == "Off" == PREDICTED_COST_ADMISSION[0]
    schema = GPUBudgetSpec.model_json_schema(by_alias=True)["properties"]["predictedCostAdmission"]
    assert tuple(schema["enum"]) == PREDICTED_COST_ADMISSION


def test_a_finished_workload_is_a_run_and_an_unstarted_one_is_not():
    doc = readme_workload(runtime="torch")
    doc["status"] = {"runStartTime": "2026-05-01T00:00:00Z"}
    run = admission.finished_run(doc, "Complete", T + timedelta(hours=3))
    assert (run.seconds, run.runtime, run.shape, run.gpu_milli) == (3 * 3600, "torch", "1 x whole:8", 8000)
    assert admission.finished_run(readme_workload(), "Complete", T) is None
    assert admission.finished_run({"metadata": {"uid": "x"}, "status": doc["status"]}, "Complete", T) is None


def test_no_model_predicts_the_prior_and_says_so():
    p = predict(None, shape_of(readme_workload()))
    assert not p.from_model and "no finished run recorded yet" in p.fallback


def duties_on(tmp_path, clock) -> CostDuties:
    store = CostStore(str(tmp_path / "cost.db"))
    store.migrate()
    return CostDuties(
        CostService(store, cluster="t"),
        now=lambda: clock[0],
        optimizer=OptimizerDuties(store, now=lambda: clock[0]),
    )


def test_cost_duties_learn_from_finished_workloads_and_predict_at_admission(tmp_path):
    clock = [T]
    duties = duties_on(tmp_path, clock)
    duties.book = BOOK
    for i in range(30):  # 30 finished 3-hour runs of the torch runtime in ml-team
        doc = readme_workload(runtime="torch")
        doc["metadata"]["uid"] = f"u-{i}"
        start = T + timedelta(hours=4 * i)
        doc["status"] = {"runStartTime": start.isoformat().replace("+00:00", "Z")}
        duties.workload_finished(doc, "Complete", start + timedelta(hours=3))
    clock[0] = T + timedelta(days=6)
    assert "runtime" in duties.optimizer.refit_due()
    record = duties.optimizer.record("runtime")
    assert record.samples == 30 and record.metrics["p90_coverage"] == 1.0
    status, decision = duties.workload_admission(readme_workload(runtime="torch"), clock[0])
    assert decision is None
    assert (
        status["reason"]
        == "from 30 finished runs of runtime torch in ml-team shaped 1 x whole:8 (of 30 in all)"
    )
    assert abs(status["durationSeconds"]["p50"] - 3 * 3600) < 3 * 3600 * 0.05
    assert status["cost"]["currency"] == "USD" and Decimal(status["cost"]["expected"]) > Decimal("90")
    # a budget with little left holds the next one
    spec = BudgetSpec(
        "ml-research", "ml", ("ml-team",), "Monthly", Decimal("100"), predicted_cost_admission="Hold"
    )
    status_ = BudgetStatus(
        "ml-research",
        "ml",
        Period(T, T + timedelta(days=30)),
        "USD",
        Decimal("100"),
        Decimal("95"),
        Decimal("0.95"),
        Decimal("1"),
        Decimal("100"),
        "mean",
        (),
        False,
        False,
    )
    duties._rooms["repo"] = budget_rooms([spec], [status_])
    _, decision = duties.workload_admission(readme_workload(runtime="torch"), clock[0])
    assert decision[0] == "Hold" and "the 5.00 USD left of GPUBudget ml-research" in decision[2]


def test_cost_duties_admit_as_today_when_the_optimizer_cannot_read_the_workload(tmp_path):
    duties = duties_on(tmp_path, [T])
    duties.book = BOOK
    assert duties.workload_admission({"spec": "nonsense"}, T) == (None, None)
    duties.workload_finished({"spec": "nonsense"}, "Complete", T)  # ignored, logged
