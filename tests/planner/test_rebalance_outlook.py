"""The rebalancing rule with an outlook (the demand the optimizer expects, kgwe.planner.rebalance.Outlook):
idle GPUs prepared before pods queue, never a GPU of a busy node, only changes worth their disruption, no
release while the demand is expected — and without an outlook, exactly the reactive rule."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kgwe.gpu import catalog
from kgwe.gpu.layouts import fit
from kgwe.planner.model import GPUState, PoolRequest
from kgwe.planner.plan import plan_pool
from kgwe.planner.rebalance import (
    PREPARE_FILL,
    Measurement,
    Outlook,
    Record,
    Sample,
    Settings,
    evaluate,
)

H100 = catalog.model_by_key("H100-80GB")
T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
SETTINGS = Settings(interval=5 * MINUTE, window=15 * MINUTE, max_gpus=8)
BIG = Outlook({"7g.80gb": 6}, {"7g.80gb": 1.0}, "from 6.0 h of measured MIG demand")


def node(name: str, profiles: list[str], busy: set[int] = frozenset()) -> list[GPUState]:
    placed = fit(H100, profiles)
    assert placed is not None
    return [GPUState(name, i, H100.key, placed, placed[:1] if i in busy else ()) for i in range(8)]


def pool(*nodes: list[GPUState]) -> PoolRequest:
    return PoolRequest("p", tuple(g for n in nodes for g in n), shares={"1g.10gb": 1.0})


def layouts(plan_pool: PoolRequest, node_name: str) -> Counter[str]:
    return Counter(p for g in plan_pool.gpus if g.node == node_name for p, _ in g.layout or ())


def test_idle_gpus_are_prepared_for_the_expected_demand_before_any_pod_queues():
    request = pool(node("a", ["1g.10gb"] * 7), node("b", ["1g.10gb"] * 7))
    d = evaluate(request, Measurement(), Record("r"), SETTINGS, T0, outlook=BIG)
    assert d.taken and d.plan is not None
    assert d.event.startswith("preparing for the demand expected (7g.80gb ")
    assert "from 6.0 h of measured MIG demand" in d.event
    made = Counter(p for g in d.plan.changes() for p in g.target_profiles or [])
    assert made["7g.80gb"] >= 6 and d.plan.gpus_changed <= SETTINGS.max_gpus


def test_a_node_holding_a_pod_is_never_prepared():
    request = pool(node("busy", ["1g.10gb"] * 7, busy={0}), node("idle", ["1g.10gb"] * 7))
    d = evaluate(request, Measurement(in_use={"1g.10gb": 1}), Record("r"), SETTINGS, T0, outlook=BIG)
    assert d.taken and {g.node for g in d.plan.changes()} == {"idle"}


def test_without_an_outlook_the_reactive_rule_decides_alone():
    request = pool(node("a", ["1g.10gb"] * 7))
    assert not evaluate(request, Measurement(), Record("r"), SETTINGS, T0).taken
    pending = Measurement(pending={"7g.80gb": 2}, pending_pods={"7g.80gb": 2})
    plain = evaluate(request, pending, Record("r"), SETTINGS, T0)
    assert plain.taken and plain.event.startswith("2 pending 7g.80gb pods")
    assert plain == evaluate(request, pending, Record("r"), SETTINGS, T0, outlook=None)


def test_a_layout_ready_for_the_outlook_changes_nothing():
    request = pool(node("a", ["7g.80gb"]))
    d = evaluate(request, Measurement(), Record("r"), SETTINGS, T0, outlook=BIG)
    assert not d.taken and "the layout is ready for the demand expected" in d.record.message


def test_a_change_covering_too_little_expected_demand_per_gpu_is_not_taken():
    small = Outlook({"1g.20gb": 1}, {}, "")  # one small instance: not worth repartitioning a GPU for
    request = pool(node("a", ["1g.10gb"] * 7))
    d = evaluate(request, Measurement(), Record("r"), SETTINGS, T0, outlook=small)
    assert not d.taken and "not worth the disruption" in d.record.message


def test_nothing_is_released_towards_the_shares_while_the_demand_is_expected():
    # the pool was grown for 7g.80gb; that demand is gone for longer than the window; the outlook still
    # expects it, so the layout holds (the reactive rule would release it towards the 1g.10gb shares)
    request = pool(node("a", ["7g.80gb"]))
    old = Record(
        "r",
        epoch=1,
        target={"7g.80gb": 8},
        decided_at=T0 - 60 * MINUTE,
        samples=(Sample(T0 - 40 * MINUTE, {"7g.80gb": 8}),),
    )
    reactive = evaluate(request, Measurement(), old, SETTINGS, T0)
    assert reactive.taken and "demand fell" in reactive.event
    kept = evaluate(request, Measurement(), old, SETTINGS, T0, outlook=BIG)
    assert not kept.taken


def test_the_target_fills_the_pool_in_the_expected_mix_never_beyond_it():
    request = pool(node("a", ["1g.10gb"] * 7), node("b", ["1g.10gb"] * 7))
    mixed = Outlook({"3g.40gb": 1}, {"7g.80gb": 3.0, "3g.40gb": 1.0})
    target = mixed.target(request)
    slots = 16 * H100.compute_slots
    assert target["7g.80gb"] == int(0.75 * PREPARE_FILL * slots // 7)
    assert target["3g.40gb"] == int(0.25 * PREPARE_FILL * slots // 3)
    huge = Outlook({"7g.80gb": 1000, "1g.10gb": 1000}, {})
    sizes = {"7g.80gb": 7, "1g.10gb": 1}
    assert sum(n * sizes[p] for p, n in huge.target(request).items()) <= slots
    assert Outlook({"9g.999gb": 3}, {"9g.999gb": 1.0}).target(request) == {}  # a profile no GPU offers


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sets(st.integers(0, 7), max_size=3), min_size=1, max_size=3),
    st.dictionaries(
        st.sampled_from(["7g.80gb", "3g.40gb", "2g.20gb", "1g.10gb"]), st.integers(0, 20), max_size=4
    ),
    st.dictionaries(st.sampled_from(["7g.80gb", "3g.40gb", "4g.40gb"]), st.floats(0, 1), max_size=3),
)
def test_whatever_the_outlook_no_gpu_of_a_busy_node_changes(busy, level, mix):
    nodes = [node(f"n{i}", ["1g.10gb"] * 7, busy=b) for i, b in enumerate(busy)]
    request = pool(*nodes)
    held = sum(len(b) for b in busy)
    d = evaluate(
        request, Measurement(in_use={"1g.10gb": held}), Record("r"), SETTINGS, T0, outlook=Outlook(level, mix)
    )
    busy_nodes = {f"n{i}" for i, b in enumerate(busy) if b}
    if d.plan is not None:
        assert not {g.node for g in d.plan.changes()} & busy_nodes
        assert d.plan.in_use_destroyed == 0


def test_the_rollout_replanning_the_named_nodes_for_the_target_makes_the_layout_decided():
    # the controller rolls a decision out by planning the pool for the record's target with the strategy's
    # shares, every node but the named ones pinned (kgwe.reconcile.desired): that must be the layout decided
    request = pool(
        node("busy", ["1g.10gb"] * 7, busy={0}), node("a", ["1g.10gb"] * 7), node("b", ["1g.10gb"] * 7)
    )
    mixed = Outlook({"7g.80gb": 3}, {"7g.80gb": 0.5, "4g.40gb": 0.3, "3g.40gb": 0.2})
    d = evaluate(request, Measurement(in_use={"1g.10gb": 1}), Record("r"), SETTINGS, T0, outlook=mixed)
    assert d.taken and d.plan is not None
    gpus = tuple(replace(g, pinned=g.node not in d.record.nodes) for g in request.gpus)
    rollout = plan_pool(replace(request, gpus=gpus, demand=dict(d.record.target), fewest_changes=True))
    decided = sorted(sorted(g.target_profiles or []) for g in d.plan.gpus)
    rolled = sorted(sorted(g.target_profiles or []) for g in rollout.gpus)
    assert rolled == decided
