"""The demand-driven MIG rebalancing rule (kgwe.planner.rebalance) on plain pools: when a new target is
taken, which GPUs it changes, and how hysteresis, the per-decision cap and the interval hold churn back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kgwe.gpu import catalog
from kgwe.gpu.layouts import fit
from kgwe.planner.model import GPUState, PoolRequest, RolloutLimits
from kgwe.planner.rebalance import (
    Measurement,
    Record,
    Sample,
    Settings,
    carry_over,
    evaluate,
    idle_nodes_only,
)

H100 = catalog.model_by_key("H100-80GB")
T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
SETTINGS = Settings(interval=5 * MINUTE, window=15 * MINUTE, max_gpus=4)


def gpus(node: str, profiles: list[str], count: int = 8, busy: dict[int, list[str]] | None = None):
    placed = fit(H100, profiles)
    assert placed is not None
    out = []
    for i in range(count):
        held = tuple(inst for inst in placed if inst.profile in (busy or {}).get(i, []))[:1]
        out.append(GPUState(node, i, H100.key, placed, held))
    return out


def pool(*nodes: list[GPUState], shares: dict[str, float] | None = None, drain: bool = False) -> PoolRequest:
    return PoolRequest(
        "inference",
        tuple(g for n in nodes for g in n),
        shares=shares if shares is not None else {"3g.40gb": 1.0},
        limits=RolloutLimits(allow_drain=drain),
    )


def test_pending_pods_repartition_idle_gpus_on_as_few_nodes_as_possible() -> None:
    busy = gpus("n0", ["3g.40gb", "3g.40gb"], busy={0: ["3g.40gb"]})
    request = pool(busy, gpus("n1", ["3g.40gb", "3g.40gb"]), gpus("n2", ["3g.40gb", "3g.40gb"]))
    m = Measurement(pending={"1g.10gb": 20}, in_use={"3g.40gb": 1}, pending_pods={"1g.10gb": 20})
    decision = evaluate(request, m, Record("rev"), SETTINGS, T0)
    assert decision.taken and decision.plan is not None
    assert decision.record.epoch == 1
    assert decision.record.target == {"1g.10gb": 20, "3g.40gb": 1}
    changed = decision.plan.changes()
    assert len(changed) == 3  # 3 GPUs x 7 instances serve 20
    assert {g.node for g in changed} == {"n1"}  # one node paused, never the node with a workload
    assert decision.record.nodes == ("n1",)
    assert decision.event == "20 pending 1g.10gb pods; repartitioning 3 idle GPUs on n1"


def test_a_node_with_a_workload_is_never_picked_without_drain() -> None:
    only_busy = gpus("n0", ["3g.40gb", "3g.40gb"], busy={0: ["3g.40gb"]})
    m = Measurement(pending={"1g.10gb": 5}, in_use={"3g.40gb": 1})
    decision = evaluate(pool(only_busy), m, Record("rev"), SETTINGS, T0)
    assert not decision.taken
    assert "no layout within the limits serves more of it" in decision.record.message
    with_drain = evaluate(pool(only_busy, drain=True), m, Record("rev"), SETTINGS, T0)
    assert with_drain.taken  # the strategy drains: the planner still avoids the busy GPU itself
    assert all(g.in_use_destroyed == 0 for g in with_drain.plan.changes())


def test_idle_nodes_only_pins_every_gpu_of_a_busy_node() -> None:
    request = pool(gpus("n0", ["3g.40gb"], busy={3: ["3g.40gb"]}), gpus("n1", ["3g.40gb"]))
    states = idle_nodes_only(request)
    assert all(g.pinned for g in states if g.node == "n0")
    assert not any(g.pinned for g in states if g.node == "n1")


def test_cap_limits_gpus_changed_per_decision_and_the_rest_waits_for_the_next_interval() -> None:
    request = pool(gpus("n1", ["3g.40gb", "3g.40gb"]), gpus("n2", ["3g.40gb", "3g.40gb"]))
    m = Measurement(pending={"1g.10gb": 60}, pending_pods={"1g.10gb": 60})
    first = evaluate(request, m, Record("rev"), SETTINGS, T0)
    assert first.taken and first.plan.gpus_changed == SETTINGS.max_gpus
    soon = evaluate(request, m, first.record, SETTINGS, T0 + MINUTE)
    assert not soon.taken  # not due: same profiles pending, less than an interval later
    later = evaluate(request, m, first.record, SETTINGS, T0 + 5 * MINUTE)
    assert later.taken and later.record.epoch == 2  # a new decision, again at most the cap


def test_new_demand_is_evaluated_at_once_but_decided_at_most_once_per_interval() -> None:
    request = pool(gpus("n1", ["3g.40gb", "3g.40gb"]))
    first = evaluate(request, Measurement(pending={"1g.10gb": 7}), Record("rev"), SETTINGS, T0)
    assert first.taken
    other = Measurement(pending={"1g.10gb": 7, "2g.20gb": 3})
    second = evaluate(request, other, first.record, SETTINGS, T0 + MINUTE)
    assert not second.taken
    assert second.record.evaluated_at == T0 + MINUTE  # evaluated (new profile pending), not decided
    assert "one per interval" in second.record.message


def test_falling_demand_is_held_for_the_stabilization_window_then_released() -> None:
    request = pool(gpus("n1", ["1g.10gb"] * 7, count=3) + gpus("n1b", ["3g.40gb", "3g.40gb"], count=5))
    held = Record("rev", epoch=1, target={"1g.10gb": 20}, decided_at=T0, evaluated_at=T0)
    held = Record(**{**held.__dict__, "samples": (Sample(T0, {"1g.10gb": 20}),)})
    gone = Measurement()
    for minutes in (5, 10):  # within the 15-minute window: the peak (20) is still in force
        d = evaluate(request, gone, held, SETTINGS, T0 + minutes * MINUTE)
        assert not d.taken and d.record.target == {"1g.10gb": 20}
        held = d.record
    released = evaluate(request, gone, held, SETTINGS, T0 + 15 * MINUTE)
    assert released.taken and released.record.target == {} and not released.record.grow
    fell = "demand fell for the whole stabilization window (1g.10gb 20 -> 0)"
    assert released.event == f"{fell}; repartitioning 3 idle GPUs on n1"
    assert 0 < released.plan.gpus_changed <= SETTINGS.max_gpus  # back towards the shares, capped


def test_no_decision_while_a_wave_is_in_flight() -> None:
    request = pool(gpus("n1", ["3g.40gb", "3g.40gb"]))
    d = evaluate(request, Measurement(pending={"1g.10gb": 7}), Record("rev"), SETTINGS, T0, in_flight=True)
    assert not d.taken and d.record.message == "waiting for the rollout wave in flight"
    assert d.record.samples == (Sample(T0, {"1g.10gb": 7}),)  # the demand still counts in the window


def test_a_change_that_serves_less_than_one_pending_instance_per_gpu_is_not_taken() -> None:
    # demand held from the window (8 x 3g.40gb) the pool no longer has: serving one pending 2g.20gb pod
    # would take repartitioning 4 GPUs for the held demand and one for the pod
    request = pool(gpus("n1", ["1g.10gb"] * 7))
    held = Record("rev", samples=(Sample(T0 - MINUTE, {"3g.40gb": 8}),))
    wide = Settings(interval=5 * MINUTE, window=15 * MINUTE, max_gpus=8)
    d = evaluate(request, Measurement(pending={"2g.20gb": 1}), held, wide, T0)
    assert not d.taken
    assert "would serve 1 by repartitioning 5 GPU(s): not worth the disruption" in d.record.message


def test_a_rebalance_serves_demand_with_the_fewest_gpus_changed() -> None:
    # the strategy's shares favour 2g.20gb; 16 pending 3g.40gb pods need 8 GPUs at 2 x 3g.40gb, not 16 GPUs
    # at 3g.40gb + 2 x 2g.20gb (shares only shape the GPUs that change)
    request = pool(gpus("n1", ["2g.20gb"] * 3), gpus("n2", ["2g.20gb"] * 3), shares={"2g.20gb": 1.0})
    wide = Settings(interval=5 * MINUTE, window=15 * MINUTE, max_gpus=16)
    d = evaluate(request, Measurement(pending={"3g.40gb": 16}), Record("rev"), wide, T0)
    assert d.taken and d.plan.gpus_changed == 8 and d.record.grow
    assert all(g.target_profiles == ["3g.40gb", "3g.40gb"] for g in d.plan.changes())


def test_demand_counts_held_instances_less_the_reclaimable_ones() -> None:
    m = Measurement(pending={"1g.10gb": 2}, in_use={"1g.10gb": 5, "3g.40gb": 2}, reclaimable={"3g.40gb": 2})
    assert m.demand() == {"1g.10gb": 7}


def test_record_round_trips_through_status_and_garbage_is_dropped() -> None:
    r = Record(
        "inference.abc",
        epoch=3,
        target={"1g.10gb": 20},
        nodes=("n1",),
        decided_at=T0,
        evaluated_at=T0,
        samples=(Sample(T0, {"1g.10gb": 20}),),
        pending={"1g.10gb": 4},
        pending_pods={"1g.10gb": 3},
        message="m",
    )
    assert Record.from_status(r.to_status()) == r
    assert r.rollout_revision() == "inference.abc.r3"
    assert Record("x").rollout_revision() == "x"
    for bad in (
        None,
        "x",
        {"epoch": 1},
        {"revision": "r", "target": {"a": "many"}},
        {"revision": "r", "decidedAt": "no"},
    ):
        assert Record.from_status(bad) is None


def test_a_new_strategy_revision_starts_at_epoch_zero_and_keeps_the_measured_demand() -> None:
    r = Record("old", epoch=4, target={"1g.10gb": 9}, nodes=("n1",), decided_at=T0)
    fresh = carry_over(r, "new")
    assert (fresh.revision, fresh.epoch, fresh.target, fresh.nodes) == ("new", 0, {"1g.10gb": 9}, ())
    assert carry_over(r, "old") is r
    assert carry_over(None, "new") == Record("new")


@pytest.mark.parametrize("pending", [0, 3])
def test_evaluation_is_deterministic(pending: int) -> None:
    request = pool(gpus("n1", ["3g.40gb", "3g.40gb"]), gpus("n2", ["3g.40gb", "3g.40gb"]))
    m = Measurement(pending={"1g.10gb": pending} if pending else {})
    assert evaluate(request, m, Record("rev"), SETTINGS, T0) == evaluate(
        request, m, Record("rev"), SETTINGS, T0
    )


def test_a_small_fall_keeps_the_target_and_nothing_is_released_while_pods_are_pending() -> None:
    request = pool(gpus("n1", ["1g.10gb"] * 7, count=3) + gpus("n1b", ["3g.40gb", "3g.40gb"], count=5))
    held = Record("rev", epoch=1, target={"1g.10gb": 20}, decided_at=T0 - 30 * MINUTE)
    small = evaluate(request, Measurement(in_use={"1g.10gb": 14}), held, SETTINGS, T0)
    assert not small.taken and small.record.target == {"1g.10gb": 20}
    assert "less than one GPU's worth (1g.10gb 20 -> 14)" in small.record.message
    every_node_busy = pool(
        gpus("n1", ["1g.10gb"] * 7, count=3, busy={0: ["1g.10gb"]}),
        gpus("n2", ["3g.40gb", "3g.40gb"], count=5, busy={0: ["3g.40gb"]}),
    )
    waiting = Measurement(pending={"3g.40gb": 99}, in_use={"3g.40gb": 1, "1g.10gb": 1})
    busy = evaluate(every_node_busy, waiting, held, SETTINGS, T0)
    assert not busy.taken and busy.record.target == {"1g.10gb": 20}  # pods wait: no release meanwhile


def test_a_fall_that_changes_no_gpu_lowers_the_target_without_a_decision() -> None:
    request = pool(gpus("n1", ["3g.40gb", "3g.40gb"]))  # already the shares' layout
    held = Record("rev", epoch=3, target={"1g.10gb": 10}, decided_at=T0 - 30 * MINUTE)
    d = evaluate(request, Measurement(), held, SETTINGS, T0)
    assert not d.taken and d.event is None
    assert d.record.target == {} and d.record.epoch == 3
    assert d.record.message.endswith("no GPU needs a new layout")
