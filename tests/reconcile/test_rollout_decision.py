"""Property tests of the pure MIG rollout decision, including a simulated fleet run to completion."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kgwe.reconcile.rollout import (
    Action,
    NodeState,
    PoolPolicy,
    plan_rollout,
    resolve_max_unavailable,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)

node_st = st.builds(
    NodeState,
    name=st.sampled_from([f"n{i:02d}" for i in range(40)]),
    pool=st.sampled_from(["a", "b"]),
    desired_config=st.sampled_from(["cfg-x", "cfg-y"]),
    current_config=st.sampled_from([None, "cfg-x", "cfg-y", "all-disabled"]),
    state=st.sampled_from([None, "pending", "success", "failed", "rebooting"]),
    requested_at=st.sampled_from([None, NOW - timedelta(seconds=10), NOW - timedelta(hours=2)]),
    gpu_pods=st.integers(0, 3),
    cordoned_by_kgwe=st.booleans(),
)
fleet_st = st.lists(node_st, max_size=30, unique_by=lambda n: n.name)
policy_st = st.builds(
    PoolPolicy,
    name=st.just("x"),
    max_unavailable=st.one_of(st.integers(1, 5), st.sampled_from(["10%", "25%", "50%"])),
    drain=st.booleans(),
    timeout_seconds=st.just(600.0),
)


def in_flight(n: NodeState) -> bool:
    """What the node is doing, whatever its target: being applied, or drained for a change."""
    applying = n.state in ("pending", "rebooting") or (
        n.state not in ("success", "failed")
        and (n.requested_at is not None or n.current_config == n.desired_config)
    )
    return applying or (n.current_config != n.desired_config and n.cordoned_by_kgwe and n.state != "failed")


@settings(max_examples=300, deadline=None)
@given(fleet_st, policy_st, policy_st)
def test_safety_invariants(nodes, pa, pb):
    policies = {"a": replace(pa, name="a"), "b": replace(pb, name="b")}
    plan = plan_rollout(nodes, policies, NOW)
    by_name = {n.name: n for n in nodes}
    for action in plan.actions:
        node = by_name[action.node]
        policy = policies[node.pool]
        if action.kind == "relabel":
            assert node.gpu_pods == 0, "never relabel a node whose GPUs are in use"
            assert action.config == node.desired_config != node.current_config
        if action.kind in ("cordon", "evict"):
            assert policy.drain or node.cordoned_by_kgwe, "no drain unless the strategy asks for it"
        if action.kind == "uncordon":
            assert node.cordoned_by_kgwe, "never uncordon an administrator's cordon"
    for pool, progress in plan.pools.items():
        members = [n for n in nodes if n.pool == pool]
        names = {n.name for n in members}
        started = {
            a.node
            for a in plan.actions
            if a.kind in ("relabel", "cordon") and a.node in names and not by_name[a.node].cordoned_by_kgwe
        }
        before = sum(in_flight(n) for n in members)
        limit = resolve_max_unavailable(policies[pool].max_unavailable, len(members))
        if started:
            assert before + len(started) <= limit, "at most maxUnavailable nodes in flight"
        if progress.stopped:
            assert not started, "a stopped pool starts nothing new"
        counted = (
            progress.done
            + progress.in_progress
            + progress.draining
            + progress.pending
            + progress.waiting_busy
            + progress.failed
            + progress.timed_out
        )
        assert sorted(counted) == sorted(n.name for n in members)


@settings(max_examples=100, deadline=None)
@given(fleet_st, policy_st)
def test_deterministic_and_restart_safe(nodes, policy):
    policies = {"a": replace(policy, name="a"), "b": replace(policy, name="b")}
    first = plan_rollout(nodes, policies, NOW)
    again = plan_rollout(list(reversed(nodes)), policies, NOW)  # a restarted controller reading in any order
    assert sorted(first.actions) == sorted(again.actions)
    # Nodes already relabelled are never relabelled again.
    for action in first.actions:
        if action.kind == "relabel":
            assert next(n for n in nodes if n.name == action.node).current_config != action.config


def simulate(nodes, policies, fail=frozenset(), stuck=frozenset(), finish_jobs_after=2, max_steps=200):
    """Carry out plans against a toy cluster: the MIG manager moves pending→success (or failed) one step
    after a relabel; evicted pods go away; busy pods finish after `finish_jobs_after` steps."""
    state = {n.name: n for n in nodes}
    peak_in_flight: dict[str, int] = {}
    now = NOW
    for step in range(max_steps):
        plan = plan_rollout(state.values(), policies, now)
        for pool, progress in plan.pools.items():
            peak_in_flight[pool] = max(
                peak_in_flight.get(pool, 0), len(progress.in_progress) + len(progress.draining)
            )
        if all(p.complete or p.stopped for p in plan.pools.values()) and not plan.actions:
            return plan, peak_in_flight, step
        # MIG manager reacts to the labels set in the previous step.
        for name, n in list(state.items()):
            if n.current_config == n.desired_config and n.state is None and name not in stuck:
                state[name] = replace(n, state="failed" if name in fail else "success")
            if step >= finish_jobs_after and n.gpu_pods and not policies[n.pool].drain:
                state[name] = replace(state[name], gpu_pods=0)
        for a in plan.actions:
            n = state[a.node]
            if a.kind == "relabel":
                state[a.node] = replace(n, current_config=a.config, state=None, requested_at=now)
            elif a.kind == "cordon":
                state[a.node] = replace(n, cordoned_by_kgwe=True)
            elif a.kind == "evict":
                state[a.node] = replace(n, gpu_pods=0)
            elif a.kind == "uncordon":
                state[a.node] = replace(n, cordoned_by_kgwe=False)
        now += timedelta(seconds=30)
    raise AssertionError("rollout did not settle")


def fleet(count, busy=(), pool="a"):
    return [
        NodeState(
            f"{pool}{i:02d}",
            pool,
            "new",
            current_config="old",
            state="success",
            gpu_pods=1 if i in busy else 0,
        )
        for i in range(count)
    ]


def test_fleet_rolls_through_respecting_max_unavailable():
    nodes = fleet(10, busy={3, 4})
    plan, peak, _ = simulate(nodes, {"a": PoolPolicy("a", max_unavailable="20%")})
    assert plan.pools["a"].complete and peak["a"] == 2


def test_busy_nodes_are_skipped_until_idle_without_drain():
    nodes = fleet(4, busy={0})
    first = plan_rollout(nodes, {"a": PoolPolicy("a", max_unavailable=4)}, NOW)
    assert Action("relabel", "a00", "new") not in first.actions
    assert first.pools["a"].waiting_busy == ["a00"]
    plan, _, _ = simulate(nodes, {"a": PoolPolicy("a", max_unavailable=4)})
    assert plan.pools["a"].complete


def test_drain_cordons_evicts_relabels_then_uncordons():
    nodes = fleet(2, busy={0, 1})
    policies = {"a": PoolPolicy("a", max_unavailable=1, drain=True)}
    first = plan_rollout(nodes, policies, NOW)
    assert first.actions == (Action("cordon", "a00", "new"), Action("evict", "a00"))
    plan, peak, _ = simulate(nodes, policies)
    assert plan.pools["a"].complete and peak["a"] == 1


def test_failed_node_stops_only_its_pool():
    nodes = fleet(6, pool="a") + fleet(3, pool="b")
    policies = {"a": PoolPolicy("a", max_unavailable=1), "b": PoolPolicy("b", max_unavailable=1)}
    plan, _, _ = simulate(nodes, policies, fail={"a01"})
    assert plan.pools["a"].failed == ["a01"] and plan.pools["a"].stopped
    assert "a01" in plan.pools["a"].message()
    assert plan.pools["a"].done == ["a00"] and len(plan.pools["a"].pending) == 4  # nothing after the failure
    assert plan.pools["b"].complete


def test_timeout_stalls_the_pool_naming_the_node():
    nodes = fleet(3)
    plan, _, _ = simulate(nodes, {"a": PoolPolicy("a", max_unavailable=1, timeout_seconds=90)}, stuck={"a00"})
    assert plan.pools["a"].timed_out == ["a00"] and plan.stalled[0].pool == "a"
    assert "a00" in plan.pools["a"].message()


def test_percentages():
    assert resolve_max_unavailable("10%", 25) == 2
    assert resolve_max_unavailable("10%", 5) == 1
    assert resolve_max_unavailable(3, 2) == 3
    assert resolve_max_unavailable("50%", 7) == 3
