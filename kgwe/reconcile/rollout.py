"""The safe MIG rollout decision: given what the cluster says now, which nodes to touch next.

Pure: the caller reads nodes/pods into `NodeState`s, passes `now`, and carries out the returned actions.
Nothing is remembered between calls — all rollout state is on the nodes themselves (the MIG config label,
the MIG manager's state label, and two KGWE annotations), so a controller restarted mid-rollout continues
exactly where the previous one stopped and never repeats a relabel.

Rules (README "Safety rules"; docs/facts/mig.md §4, §6: a changed GPU is wiped, the MIG manager never drains):
- relabel only a node where no running pod holds a GPU; with `drain: true` cordon and evict first;
- at most `maxUnavailable` nodes of a pool in flight (relabelled and not yet `success`, or being drained);
- a node that reports `failed`, or stays short of `success` past the timeout, stops its pool;
- nodes KGWE cordoned are uncordoned once their layout is in place (or when their pool stops untouched).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from kgwe.cluster.names import (  # noqa: F401  (re-exported: the names the rollout state lives in)
    CORDONED_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    REQUESTED_AT_ANNOTATION,
)

STATE_SUCCESS = "success"
STATE_FAILED = "failed"


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


@dataclass(frozen=True)
class PoolPolicy:
    name: str
    max_unavailable: int | str = 1  # a count, or a percentage of the pool like "10%"
    drain: bool = False
    timeout_seconds: float = 900.0


@dataclass(frozen=True, order=True)
class Action:
    """`kind` is one of: relabel (set label + annotation, drop stale state), cordon, evict, uncordon."""

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

    @property
    def stopped(self) -> bool:
        return bool(self.failed or self.timed_out)

    @property
    def complete(self) -> bool:
        return len(self.done) == self.total

    def message(self) -> str:
        if self.failed:
            names = ", ".join(self.failed)
            return f"pool {self.pool}: MIG manager reported failed on {names}; rollout stopped"
        if self.timed_out:
            return f"pool {self.pool}: no MIG success in time on {', '.join(self.timed_out)}; rollout stopped"
        parts = [f"{len(self.done)}/{self.total} done"]
        for label, nodes in (
            ("in progress", self.in_progress),
            ("draining", self.draining),
            ("pending", self.pending),
            ("waiting for idle GPUs", self.waiting_busy),
        ):
            if nodes:
                parts.append(f"{len(nodes)} {label}")
        return f"pool {self.pool}: " + ", ".join(parts)

    def as_status(self) -> dict:
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


def _classify(node: NodeState, policy: PoolPolicy, now: datetime, progress: PoolProgress) -> str:
    if node.current_config == node.desired_config:
        if node.state == STATE_SUCCESS:
            progress.done.append(node.name)
            return "done"
        if node.state == STATE_FAILED:
            progress.failed.append(node.name)
            return "failed"
        started = node.requested_at
        if started is not None and (now - started).total_seconds() > policy.timeout_seconds:
            progress.timed_out.append(node.name)
            return "timed_out"
        progress.in_progress.append(node.name)
        return "in_progress"
    if node.cordoned_by_kgwe:
        progress.draining.append(node.name)
        return "draining"
    if node.gpu_pods and not policy.drain:
        progress.waiting_busy.append(node.name)
        return "busy"
    progress.pending.append(node.name)
    return "pending"


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
