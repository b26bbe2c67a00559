"""The safe MIG rollout decision: given what the cluster says now, which nodes to touch next.

Pure: the caller reads nodes/pods into `NodeState`s, passes `now`, and carries out the returned actions.
Nothing is remembered between calls — all rollout state is on the nodes themselves (the MIG config label,
the MIG manager's state label, and KGWE's annotations), so a controller restarted mid-rollout continues
exactly where the previous one stopped and never repeats a relabel.

A node's rollout state comes from what the node is doing, never from whether its label matches today's
plan: a node the MIG manager is applying (state `pending`/`rebooting`, or relabelled by KGWE and not yet
reported) is in flight whatever its target, so plans that change cannot relabel it mid-apply nor let more
than `maxUnavailable` nodes be in flight; a node reporting `failed` stops its pool whatever its target.

Rules (docs/safety.md; docs/facts/mig.md §4, §6: a changed GPU is wiped, the MIG manager never drains):
- relabel only a node where no running pod holds a GPU; with `drain: true` cordon and evict first;
- at most `maxUnavailable` nodes of a pool in flight (relabelled and not yet `success`, or being drained);
- never relabel a node while its MIG manager is applying: its target is fixed until `success` or `failed`;
- a node that reports `failed`, or stays short of `success` past the timeout, stops its pool for good:
  no retry, no further node of the pool relabelled, until a person annotates the node `RETRY_ANNOTATION`;
- nodes KGWE cordoned are uncordoned once their layout is in place (or when their pool stops untouched).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from kgwe.vocab import (  # noqa: F401  (re-exported: the names the rollout state lives in)
    CORDONED_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    REQUESTED_AT_ANNOTATION,
    RETRY_ANNOTATION,
)

STATE_SUCCESS = "success"
STATE_FAILED = "failed"
STATES_APPLYING = ("pending", "rebooting")  # the MIG manager is changing the node's GPUs


@dataclass(frozen=True)
class NodeState:
    """One node as read from the cluster."""

    name: str
    pool: str
    desired_config: str
    current_config: str | None = None  # nvidia.com/mig.config
    state: str | None = None  # nvidia.com/mig.config.state
    requested_at: datetime | None = None  # REQUESTED_AT_ANNOTATION
    gpu_pods: int = 0  # running (non-terminal) pods holding GPUs on this node
    cordoned_by_kgwe: bool = False  # CORDONED_ANNOTATION present
    retry_requested: bool = False  # RETRY_ANNOTATION present (a person's acknowledgement, not yet taken)
    failure_acknowledged: bool = False  # ACKNOWLEDGED_ANNOTATION names this node's current attempt


@dataclass(frozen=True)
class PoolPolicy:
    name: str
    max_unavailable: int | str = 1  # a count, or a percentage of the pool like "10%"
    drain: bool = False
    timeout_seconds: float = 900.0


@dataclass(frozen=True, order=True)
class Action:
    """`kind` is one of: relabel (set label + annotation, drop stale state), cordon, evict, uncordon,
    acknowledge (take a person's RETRY_ANNOTATION: record which failed attempt it acknowledges)."""

    kind: str
    node: str
    config: str | None = None


@dataclass
class PoolProgress:
    pool: str
    total: int
    max_unavailable: int
    done: list[str] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)  # relabelled, waiting for the MIG manager
    draining: list[str] = field(default_factory=list)  # cordoned by KGWE, GPU pods being evicted
    pending: list[str] = field(default_factory=list)  # need a change, not started yet
    waiting_busy: list[str] = field(default_factory=list)  # need a change but GPU pods run and drain is off
    failed: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)  # failed or timed out, and a person said go on

    @property
    def stopped(self) -> bool:
        return bool(self.failed or self.timed_out)

    @property
    def complete(self) -> bool:
        return len(self.done) == self.total

    def message(self) -> str:
        resume = f"rollout stopped until a person annotates the node {RETRY_ANNOTATION}=true"
        if self.failed:
            names = ", ".join(self.failed)
            return f"pool {self.pool}: MIG manager reported failed on {names}; {resume}"
        if self.timed_out:
            return f"pool {self.pool}: no MIG success in time on {', '.join(self.timed_out)}; {resume}"
        parts = [f"{len(self.done)}/{self.total} done"]
        for label, nodes in (
            ("in progress", self.in_progress),
            ("draining", self.draining),
            ("pending", self.pending),
            ("waiting for idle GPUs", self.waiting_busy),
            ("failed and acknowledged", self.acknowledged),
        ):
            if nodes:
                parts.append(f"{len(nodes)} {label}")
        return f"pool {self.pool}: " + ", ".join(parts)

    def as_status(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "total": self.total,
            "maxUnavailable": self.max_unavailable,
            "done": len(self.done),
            "inProgress": sorted(self.in_progress),
            "draining": sorted(self.draining),
            "pending": len(self.pending),
            "waitingBusy": sorted(self.waiting_busy),
            "failed": sorted(self.failed),
            "timedOut": sorted(self.timed_out),
            "acknowledged": sorted(self.acknowledged),
            "stopped": self.stopped,
            "message": self.message(),
        }


@dataclass(frozen=True)
class RolloutPlan:
    actions: tuple[Action, ...]
    pools: Mapping[str, PoolProgress]

    @property
    def stalled(self) -> list[PoolProgress]:
        return [p for p in self.pools.values() if p.stopped]


def resolve_max_unavailable(value: int | str, total: int) -> int:
    """Kubernetes-style: a count, or a percentage of the pool rounded down; never less than 1."""
    if isinstance(value, str):
        text = value.strip()
        count = math.floor(total * float(text[:-1]) / 100.0) if text.endswith("%") else int(text)
    else:
        count = int(value)
    return max(1, count)


def _applying(node: NodeState) -> bool:
    """The MIG manager is (or is about to be) changing this node: its target is fixed until it reports."""
    if node.state in STATES_APPLYING:
        return True
    if node.state in (STATE_SUCCESS, STATE_FAILED):
        return False
    # No state yet: KGWE selected a config and the MIG manager has not reported, or (no request of KGWE's)
    # the node already names its target and waits for its first report.
    return node.requested_at is not None or node.current_config == node.desired_config


def _needs_change(node: NodeState, policy: PoolPolicy, progress: PoolProgress) -> str:
    if node.cordoned_by_kgwe:
        progress.draining.append(node.name)
        return "draining"
    if node.gpu_pods and not policy.drain:
        progress.waiting_busy.append(node.name)
        return "busy"
    progress.pending.append(node.name)
    return "pending"


def _classify(node: NodeState, policy: PoolPolicy, now: datetime, progress: PoolProgress) -> str:
    acknowledged = node.failure_acknowledged or node.retry_requested
    if node.state == STATE_FAILED:
        if not acknowledged:
            progress.failed.append(node.name)
            return "failed"
        progress.acknowledged.append(node.name)
        if node.current_config != node.desired_config:  # a new target: the MIG manager acts on a new label
            return _needs_change(node, policy, progress)
        return "acknowledged"  # the same config again: only a re-run of the node's MIG manager retries it
    if _applying(node):
        started = node.requested_at
        late = started is not None and (now - started).total_seconds() > policy.timeout_seconds
        if late and not acknowledged:
            progress.timed_out.append(node.name)
            return "timed_out"
        if late:
            progress.acknowledged.append(node.name)
        progress.in_progress.append(node.name)  # counted against maxUnavailable whatever its target
        return "in_progress"
    if node.current_config == node.desired_config:
        progress.done.append(node.name)
        return "done"
    return _needs_change(node, policy, progress)


def plan_rollout(
    nodes: Iterable[NodeState], policies: Mapping[str, PoolPolicy], now: datetime
) -> RolloutPlan:
    """The next actions for every pool, and where each pool stands."""
    by_pool: dict[str, list[NodeState]] = {}
    for node in nodes:
        by_pool.setdefault(node.pool, []).append(node)
    actions: list[Action] = []
    pools: dict[str, PoolProgress] = {}
    for pool_name in sorted(by_pool):
        members = sorted(by_pool[pool_name], key=lambda n: n.name)
        policy = policies.get(pool_name) or PoolPolicy(pool_name)
        budget = resolve_max_unavailable(policy.max_unavailable, len(members))
        progress = PoolProgress(pool_name, len(members), budget)
        kinds = {n.name: _classify(n, policy, now, progress) for n in members}
        pools[pool_name] = progress

        for node in members:
            kind = kinds[node.name]
            if node.retry_requested:  # taken even if the node recovered meanwhile: it must not linger
                actions.append(Action("acknowledge", node.name))
            if kind == "done" and node.cordoned_by_kgwe:
                actions.append(Action("uncordon", node.name))
            elif kind == "draining":
                if progress.stopped:
                    actions.append(Action("uncordon", node.name))  # untouched: give the node back
                elif node.gpu_pods:
                    actions.append(Action("evict", node.name))
                else:
                    actions.append(Action("relabel", node.name, node.desired_config))
        if progress.stopped:
            continue

        in_flight = len(progress.in_progress) + len(progress.draining)
        free = budget - in_flight
        if free <= 0:
            continue
        # Idle nodes first (no disruption at all), then nodes to drain; names keep it deterministic.
        candidates = sorted(
            (n for n in members if kinds[n.name] == "pending"), key=lambda n: (n.gpu_pods > 0, n.name)
        )
        for node in candidates[:free]:
            if node.gpu_pods:
                actions.append(Action("cordon", node.name, node.desired_config))
                actions.append(Action("evict", node.name))
            else:
                actions.append(Action("relabel", node.name, node.desired_config))
    return RolloutPlan(tuple(actions), pools)


def after_action(node: NodeState, action: Action, now: datetime) -> NodeState:
    """How `node` reads back once `action` is carried out (what the MIG manager and pods do is not known)."""
    if action.kind == "relabel":
        return replace(
            node,
            current_config=action.config,
            state=None,
            requested_at=now,
            retry_requested=False,
            failure_acknowledged=False,
        )
    if action.kind == "acknowledge":
        stuck = node.state != STATE_SUCCESS
        return replace(node, retry_requested=False, failure_acknowledged=stuck or node.failure_acknowledged)
    if action.kind == "cordon":
        return replace(node, cordoned_by_kgwe=True)
    if action.kind == "uncordon":
        return replace(node, cordoned_by_kgwe=False)
    return node


def apply_actions(nodes: Iterable[NodeState], actions: Iterable[Action], now: datetime) -> list[NodeState]:
    """The nodes as they read back after `actions` (for status right after a reconcile)."""
    by_name = {n.name: n for n in nodes}
    for action in actions:
        if action.node in by_name:
            by_name[action.node] = after_action(by_name[action.node], action, now)
    return list(by_name.values())
