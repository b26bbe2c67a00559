"""The controller's refits on the cost store (SQLite and PostgreSQL): the MIG demand model from metered MIG
instances, the runtime model from finished runs, each with held-out scores or a note saying why not, and
the cost duties turning the newest fit into the pools' outlooks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kgwe.cost.service import CostService
from kgwe.cost.usage import UsageInterval
from kgwe.optimizer import demand
from kgwe.optimizer.fitters import fit_mig_demand, fit_runtime
from kgwe.optimizer.registry import FitInput
from kgwe.optimizer.service import OptimizerDuties
from kgwe.optimizer.store import ModelStore
from kgwe.planner.mig_demand import PoolView
from kgwe.reconcile.costs import CostDuties

NOW = datetime(2026, 5, 8, tzinfo=UTC)


def mig(pod: str, profile: str, start: datetime, hours: float | None) -> UsageInterval:
    return UsageInterval(
        pod=pod,
        namespace="serve",
        team="t",
        node="dgx-0",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        kind="mig",
        count=1,
        start=start,
        end=None if hours is None else start + timedelta(hours=hours),
        mig_profile=profile,
        pod_uid=pod,
    )


def test_mig_demand_is_fitted_on_the_week_and_scored_on_its_last_day(store):
    start = NOW - timedelta(days=3)
    store.add_usage(
        [mig(f"big-{h}", "7g.80gb", start + timedelta(hours=h), 2) for h in range(0, 72, 2)]
        + [mig("small", "1g.10gb", start, None)]
    )
    record = fit_mig_demand(FitInput(NOW, store, ModelStore(store)))
    assert record.name == demand.NAME and record.samples == 3 * 24 * 60
    model = demand.DemandModel.from_params(record.params)
    assert model.level == {"1g.10gb": 2, "7g.80gb": 2}
    assert model.mix["7g.80gb"] == 7 / 8
    assert record.metrics["level_coverage"] == 1.0 and record.metrics["mix_distance"] < 0.01
    assert record.notes == ()


def test_without_metered_mig_demand_the_record_says_the_rule_stays_reactive(store):
    record = fit_mig_demand(FitInput(NOW, store, ModelStore(store)))
    assert record.params == {} and record.samples == 0
    assert any("today's rule" in n for n in record.notes)
    runtime = fit_runtime(FitInput(NOW, store, ModelStore(store)))
    assert runtime.samples == 0 and any("the prior" in n for n in runtime.notes)


def test_cost_duties_hand_the_pools_their_outlook_and_none_from_a_stale_fit(store):
    clock = [NOW]
    store.add_usage([mig(f"p{h}", "7g.80gb", NOW - timedelta(hours=h + 1), 1) for h in range(30)])
    optimizer = OptimizerDuties(store, now=lambda: clock[0])
    duties = CostDuties(CostService(store, cluster="t"), now=lambda: clock[0], optimizer=optimizer)
    views = [PoolView("inference", ("dgx-0",), ({},), frozenset({"7g.80gb", "1g.10gb"}), {})]
    assert duties.mig_outlooks(views) == {}  # nothing fitted yet
    assert "mig-demand" in optimizer.refit_due()
    outlook = duties.mig_outlooks(views)["inference"]
    assert outlook.level == {"7g.80gb": 2} and outlook.mix == {"7g.80gb": 1.0}
    assert outlook.reason.startswith("from 30.0 h of measured MIG demand")
    clock[0] += timedelta(days=2)  # the refits have been failing for two days: no outlook
    optimizer.refit_due = lambda: []  # type: ignore[method-assign]
    assert duties.mig_outlooks(views) == {}


def test_a_runtime_model_of_many_long_named_groups_stays_within_the_records_bound():
    from kgwe.optimizer import runtime
    from kgwe.optimizer.fitters import _within_bound
    from kgwe.optimizer.record import MAX_RECORD_BYTES, ModelRecord

    name = "r" * 200
    examples = [
        runtime.Example(
            ((f"{name}{i}",), (f"{name}{i}", "ns" * 30), (f"{name}{i}", "ns" * 30, "1 x whole:8")), 60.0
        )
        for i in range(6000)
    ]
    model, kept = _within_bound(examples)
    assert kept < runtime.MAX_GROUPS
    record = ModelRecord("runtime", 1, NOW, None, NOW, model.runs, params=model.to_params())
    assert len(record.to_json()) <= MAX_RECORD_BYTES
    assert model.runs == 6000  # every run still counts at the root
