"""Property tests of the rollout decisions over random sequences of events: the MIG manager reporting (or
failing, or hanging), pods coming and going, targets changing under in-flight nodes, controller restarts
(nothing is carried between decisions) and a person's acknowledgement. Whatever happens, at most
`maxUnavailable` nodes of a pool are in flight, no node is relabelled while its MIG manager applies, and a
failed node stops its pool until it is acknowledged."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kgwe.reconcile.rollout import (
    Action,
    NodeState,
    PoolPolicy,
    after_action,
    plan_rollout,
    resolve_max_unavailable,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
CONFIGS = ("cfg-a", "cfg-b", "cfg-c")
POOLS = ("p", "q")


def applying(n: NodeState) -> bool:
    """Physically in flight: the MIG manager is (or is about to be) changing the node's GPUs."""
    return n.state in ("pending", "rebooting") or (n.state is None and n.requested_at is not None)


def unavailable(n: NodeState) -> bool:
    return applying(n) or (n.cordoned_by_kgwe and n.state != "success")


def carry_out(state: dict[str, NodeState], actions, now) -> None:
    for a in actions:  # as the cluster reads back; an eviction also ends the node's GPU pods
        node = after_action(state[a.node], a, now)
        state[a.node] = replace(node, gpu_pods=0) if a.kind == "evict" else node


event_st = st.one_of(
    st.tuples(st.just("target"), st.integers(0, 11), st.sampled_from(CONFIGS)),
    st.tuples(st.just("mig"), st.integers(0, 11), st.sampled_from(["pending", "success", "failed"])),
    st.tuples(st.just("pods"), st.integers(0, 11), st.integers(0, 2)),
    st.tuples(st.just("ack"), st.integers(0, 11), st.just(None)),
    st.tuples(st.just("tick"), st.integers(0, 11), st.just(None)),
    st.tuples(st.just("reconcile"), st.integers(0, 11), st.just(None)),
)
policy_st = st.builds(
    PoolPolicy,
    name=st.just("x"),
    max_unavailable=st.one_of(st.integers(1, 3), st.sampled_from(["25%", "50%"])),
    drain=st.booleans(),
    timeout_seconds=st.just(300.0),
)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 12),
    st.lists(st.sampled_from(CONFIGS), min_size=12, max_size=12),
    st.lists(event_st, min_size=5, max_size=80),
    policy_st,
    policy_st,
)
def test_random_event_sequences_keep_the_safety_rules(count, targets, events, pp, pq):
    policies = {"p": replace(pp, name="p"), "q": replace(pq, name="q")}
    names = [f"n{i:02d}" for i in range(count)]
    state = {
        name: NodeState(name, POOLS[i % 2], targets[i], current_config="cfg-a", state="success")
        for i, name in enumerate(names)
    }
    now = NOW
    for kind, index, value in [*events, ("reconcile", 0, None)]:
        name = names[index % count]
        node = state[name]
        if kind == "target":  # the plan changes, e.g. a new revision: whatever the node is doing
            state[name] = replace(node, desired_config=value)
        elif kind == "mig" and node.requested_at is not None and node.state not in ("success", "failed"):
            state[name] = replace(node, state=value)
        elif kind == "pods":
            state[name] = replace(node, gpu_pods=value)
        elif kind == "ack" and node.state == "failed":
            state[name] = replace(node, retry_requested=True)
        elif kind == "tick":
            now += timedelta(seconds=120)
        elif kind == "reconcile":
            before = dict(state)
            plan = plan_rollout(before.values(), policies, now)  # a fresh decision: as after a restart
            carry_out(state, plan.actions, now)
            for action in plan.actions:
                old = before[action.node]
                if action.kind == "relabel":
                    assert not applying(old), f"{old.name} relabelled while its MIG manager applies"
                    assert old.gpu_pods == 0, "never relabel a node whose GPUs are in use"
                    assert old.state != "failed" or old.retry_requested or old.failure_acknowledged
                if action.kind in ("relabel", "cordon"):
                    failed = {
                        n.name
                        for n in before.values()
                        if n.pool == old.pool
                        and n.state == "failed"
                        and not (n.retry_requested or n.failure_acknowledged)
                    }
                    assert not failed, f"pool {old.pool} went on past failed {failed}"
            for pool in POOLS:
                members = [n for n in state.values() if n.pool == pool]
                if not members:
                    continue
                limit = resolve_max_unavailable(policies[pool].max_unavailable, len(members))
                started = [
                    a for a in plan.actions if a.kind in ("relabel", "cordon") and before[a.node].pool == pool
                ]
                if started:
                    in_flight = sum(unavailable(n) for n in members)
                    assert in_flight <= limit, f"pool {pool}: {in_flight} in flight, maxUnavailable {limit}"


def test_in_flight_node_counts_whatever_its_target():
    """Two nodes applying a target the plan has since changed still use both slots of maxUnavailable: 2."""
    nodes = [
        NodeState("a", "p", "new", current_config="old", state="pending", requested_at=NOW),
        NodeState("b", "p", "new", current_config="older", state=None, requested_at=NOW),
        NodeState("c", "p", "new", current_config="old", state="success"),
    ]
    plan = plan_rollout(nodes, {"p": PoolPolicy("p", max_unavailable=2)}, NOW)
    assert plan.actions == ()
    assert sorted(plan.pools["p"].in_progress) == ["a", "b"]


def test_failed_node_stops_its_pool_even_when_its_target_changed():
    nodes = [
        NodeState("a", "p", "newer", current_config="new", state="failed", requested_at=NOW),
        NodeState("b", "p", "newer", current_config="old", state="success"),
    ]
    plan = plan_rollout(nodes, {"p": PoolPolicy("p", max_unavailable=2)}, NOW)
    assert plan.actions == () and plan.pools["p"].failed == ["a"] and plan.pools["p"].stopped
    assert "kgwe.nvidia.io/mig-retry" in plan.pools["p"].message()


def test_acknowledgement_is_taken_and_the_pool_continues():
    nodes = [
        NodeState(
            "a", "p", "new", current_config="new", state="failed", requested_at=NOW, retry_requested=True
        ),
        NodeState("b", "p", "new", current_config="old", state="success"),
    ]
    plan = plan_rollout(nodes, {"p": PoolPolicy("p", max_unavailable=1)}, NOW)
    assert plan.actions == (Action("acknowledge", "a"), Action("relabel", "b", "new"))
    assert not plan.pools["p"].stopped and plan.pools["p"].acknowledged == ["a"]
    # Once taken, the acknowledgement covers that attempt only: the node is not retried with the same config.
    after = [replace(nodes[0], retry_requested=False, failure_acknowledged=True), nodes[1]]
    assert plan_rollout(after, {"p": PoolPolicy("p", max_unavailable=1)}, NOW).actions == (
        Action("relabel", "b", "new"),
    )


def test_pending_node_is_never_relabelled_for_a_new_target():
    nodes = [NodeState("a", "p", "newer", current_config="new", state="pending", requested_at=NOW)]
    plan = plan_rollout(nodes, {"p": PoolPolicy("p", max_unavailable=5)}, NOW)
    assert plan.actions == () and plan.pools["p"].in_progress == ["a"]
