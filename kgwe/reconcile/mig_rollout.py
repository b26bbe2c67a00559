"""Carrying out the MIG rollout decision (kgwe.reconcile.rollout) on the nodes: relabel, cordon, evict,
uncordon, acknowledge, each node's actions in order and the nodes side by side; then the plan as it stands
after them. A node whose action the API refuses stops there for this pass (a Warning says why)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from kubernetes.client.exceptions import ApiException

from kgwe.cluster.client import API_CONNECTIONS
from kgwe.cluster.inventory import GpuNodeFacts
from kgwe.cluster.nodes import NodeOps
from kgwe.reconcile.desired import Desired, node_states
from kgwe.reconcile.node_actions import Record, Wording, carry_out
from kgwe.reconcile.rollout import Action, RolloutPlan, apply_actions, plan_rollout

NODE_WORKERS = API_CONNECTIONS  # nodes patched side by side: as many as the API server takes at once
MAX_NODES_IN_EVENT = 10

WORDING = Wording(cordoned="for a MIG layout change", uncordoned="after MIG change")


def run_mig_rollout(
    ops: NodeOps, desired: Desired, facts: Sequence[GpuNodeFacts], now: datetime, record: Record
) -> RolloutPlan:
    """Decide and carry out this pass's MIG actions; the plan as it stands after them."""
    states = node_states(desired, facts)
    plan = plan_rollout(states, desired.pools, now)
    per_node: dict[str, list[Action]] = {}
    for action in plan.actions:  # one node's actions run in order (cordon before evict)
        per_node.setdefault(action.node, []).append(action)

    def run_node(actions: list[Action]) -> list[Action]:
        ran = []
        for action in actions:
            revision = desired.revisions.get(desired.node_pool.get(action.node, ""))
            try:
                carry_out(ops, action, now, revision, record, WORDING)
            except ApiException as exc:
                record("Warning", "RolloutActionFailed", f"{action.kind} {action.node}: {exc.reason}")
                break
            ran.append(action)
        return ran

    with ThreadPoolExecutor(max_workers=NODE_WORKERS) as workers:  # nodes are independent of each other
        done = [a for ran in workers.map(run_node, per_node.values()) for a in ran]
    selected: dict[str, list[str]] = {}
    for action in done:
        if action.kind == "relabel":
            selected.setdefault(action.config or "", []).append(action.node)
    for config, names in sorted(selected.items()):  # one Event per config, not one per node
        shown = ", ".join(sorted(names)[:MAX_NODES_IN_EVENT]) + (
            ", ..." if len(names) > MAX_NODES_IN_EVENT else ""
        )
        record(
            "Normal", "MIGConfigSelected", f"nvidia.com/mig.config={config} on {len(names)} node(s): {shown}"
        )
    after = plan_rollout(apply_actions(states, done, now), desired.pools, now)
    return RolloutPlan(tuple(done), after.pools)
