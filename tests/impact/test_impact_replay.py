"""The impact replay: deterministic, driven by the policy, honest about sampling; and its Markdown section."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

from kgwe.cost.budgets import BudgetSpec
from kgwe.cost.pricing import pricebook
from kgwe.extender.nodes import NodeState
from kgwe.extender.profile import Profile
from kgwe.impact.record import Shape
from kgwe.impact.replay import PolicyView, replay_record
from kgwe.impact.report import CANNOT_KNOW, markdown, wants_impact
from kgwe.impact.synth import TeamDemand, synthesize
from kgwe.topology import known

UNTIL = datetime(2026, 11, 16, tzinfo=UTC)
A100 = "NVIDIA-A100-SXM4-80GB"


def nodes(n=6):
    topo = known.load("DGX-A100")
    return [NodeState(name=f"n{i}", gpus=8, product=A100, model=A100, topology=topo) for i in range(n)]


def record(days=2, load=0.8, seed=3):
    team = TeamDemand(
        "ml-training",
        "ml",
        gpus=48,
        shapes=((Shape("whole", 1), 6), (Shape("whole", 8, preference="NVLinkOptimal"), 1)),
        mean_hours=4,
        load=load,
    )
    return synthesize([team], gpus_by_product={A100: 48}, nodes=6, until=UNTIL, days=days, seed=seed)


BOOK = pricebook([{"product": A100, "onDemandPerHour": "2.00"}])


def view(strategy, **kw):
    return PolicyView(profile=Profile(strategy=strategy), nodes=nodes(), book=BOOK, **kw)


def test_same_input_same_output():
    rec = record()
    a = replay_record(rec, view("BestFit"), seed=1)
    b = replay_record(rec, view("BestFit"), seed=1)
    assert a == b
    assert a.pods == len(rec.pods) and a.scale == 1.0 and a.gpus == 48
    assert 0 < a.alloc_p10_pct <= a.alloc_mean_pct <= 100


def test_spread_strands_whole_nodes_so_eight_gpu_jobs_wait_longer():
    rec = record()
    packed = replay_record(rec, view("BestFit"))
    spread = replay_record(rec, view("Spread"))
    assert spread.pods_waited > packed.pods_waited
    assert spread.wait_mean_seconds > packed.wait_mean_seconds


def test_costs_follow_runtime_and_budgets_project_over_their_period():
    rec = record(load=0.3)
    weekly = BudgetSpec("ml", "ml", ("ml-training",), "Weekly", Decimal("1"))
    r = replay_record(rec, view("BestFit", budgets=(weekly,)))
    # every pod ran its recorded time (low load: nobody waits), priced at 2.00/GPU-hour
    gpu_seconds = sum(
        ((rec.window_seconds if p.end_s is None else p.end_s) - p.arrival_s) * rec.shapes[p.shape].count
        for p in rec.pods
    )
    assert r.pods_waited == 0
    assert r.cost_by_team["ml"] == (Decimal(gpu_seconds) * 2 / 3600).quantize(Decimal("0.01"))
    name, projected, limit = r.budgets_exceeded[0]
    assert name == "ml" and limit == Decimal("1")
    assert projected == (r.cost_by_team["ml"] * 7 / 2).quantize(Decimal("0.01"))  # two days → a week


def test_large_records_are_sampled_with_the_inventory_scaled_alike():
    rec = record(days=2, load=0.8)
    r = replay_record(rec, replace(view("BestFit"), nodes=nodes(6)), max_pods=len(rec.pods) // 3)
    assert r.pods == len(rec.pods) // 3
    assert 0.3 < r.scale < 0.4
    assert r.nodes == 2 and r.gpus == 16
    assert r == replay_record(rec, view("BestFit"), max_pods=len(rec.pods) // 3)


def test_mig_layouts_decide_which_mig_demand_is_served():
    h100 = "NVIDIA-H100-80GB-HBM3"
    team = TeamDemand("inf", "inference", gpus=8, shapes=((Shape("mig", 1, "1g.10gb"), 1),), mean_hours=2)
    rec = synthesize([team], gpus_by_product={h100: 8}, nodes=1, until=UNTIL, days=1, seed=5)
    small = NodeState(
        name="h", gpus=8, product=h100, model=h100, gpu_used_milli=[1000] * 8, mig_free={"1g.10gb": 56}
    )
    big = replace(small, mig_free={"3g.40gb": 16})
    served = replay_record(rec, PolicyView(Profile(), [small]))
    unserved = replay_record(rec, PolicyView(Profile(), [big]))
    assert served.mig_pods == unserved.mig_pods > 0
    assert served.mig_served == served.mig_pods and unserved.mig_served == 0
    assert unserved.never_started == unserved.mig_pods


def test_only_policy_kinds_that_move_placement_or_cost_ask_for_impact():
    assert wants_impact(["ScoringProfile/default"]) and wants_impact(["GPUBudget/ml", "Other/x"])
    assert wants_impact(["MIGStrategy/inference-h100"]) and wants_impact(["PricingCatalog/default"])
    assert not wants_impact([]) and not wants_impact(["GPUInventory/prod"])


def test_section_says_when_it_sampled_and_which_budgets_overflow():
    rec = record(days=2, load=0.8)
    base = replay_record(rec, view("BestFit"), max_pods=len(rec.pods) // 2)
    head = replay_record(rec, PolicyView(view("Spread").profile, nodes(), BOOK), max_pods=len(rec.pods) // 2)
    head.budgets_exceeded.append(("ml", Decimal("99.00"), Decimal("10")))
    text = markdown(rec, "`x.json`", base, head, seed=42)
    assert f"sampled: {base.pods} of {len(rec.pods)} recorded pods" in text
    assert "- head: GPUBudget/ml would be exceeded: 99.00 projected" in text
    assert "- base:" not in text
    assert CANNOT_KNOW in text and "(seed 42)" in text
    assert "| pods that waited |" in text and "| cost ml (USD) |" in text
