"""The controller's side of demand-driven MIG rebalancing: measure, decide (kgwe.planner.rebalance), and
hand the decided targets to planning.

Each reconcile of a repository whose MIGStrategies set `rebalanceInterval`:
1. takes the unschedulable MIG pods from the pod list the inventory read already made (no extra call);
2. with `minUtilizationThreshold` and a Prometheus URL, asks dcgm-exporter's engine activity per pod over the
   interval; Prometheus down degrades to allocation-only demand (held instances all count) and the
   PolicyRepository condition `UtilizationAvailable=False` says so — never a rebalance on guessed idleness;
3. decides per pool and returns the records; status.rebalance keeps them, so a new leader carries on.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kgwe.cluster.inventory import GpuNodeFacts
from kgwe.errors import KgweError
from kgwe.planner.from_policy import model_of_product, pool_requests
from kgwe.planner.mig_demand import PoolView, measure, unschedulable_mig_request
from kgwe.planner.rebalance import Decision, Record, Settings, carry_over, evaluate

log = logging.getLogger(__name__)

UTILIZATION_CONDITION = "UtilizationAvailable"

# (namespace, pod) -> mean engine activity over [start, end]; raises KgweError when the source is down
ActivityReader = Callable[[datetime, datetime], Mapping[tuple[str, str], float]]


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


@dataclass
class RebalanceResult:
    """The records in force per pool (for planning and status), the decisions taken now (for Events), and
    the utilization condition (None when no pool asks for utilization)."""

    records: dict[str, Record] = field(default_factory=dict)
    taken: dict[str, Decision] = field(default_factory=dict)
    condition: Condition | None = None

    def status(self) -> dict[str, dict]:
        return {pool: record.to_status() for pool, record in sorted(self.records.items())}


def rebalancing_strategies(strategies: Sequence[Any]) -> list[Any]:
    """The MIGStrategies with rebalancing on (a partition strategy with rebalanceInterval)."""
    return [
        s
        for s in strategies
        if s.spec.partition_strategy is not None and s.spec.partition_strategy.rebalance_interval is not None
    ]


def unschedulable_profiles(pods: Sequence[Mapping]) -> set[str]:
    """The MIG profiles unschedulable pods ask for (whatever pool may serve them)."""
    return {profile for pod in pods for profile, _ in unschedulable_mig_request(pod)}


def settings_of(strategy: Any, pool_gpus: int) -> Settings:
    partition = strategy.spec.partition_strategy
    return Settings(
        interval=partition.rebalance_interval,
        window=partition.stabilization_window,
        max_gpus=partition.max_gpus_per_rebalance(pool_gpus),
    )


def pool_views(strategies: Sequence[Any], inventory: Any) -> list[PoolView]:
    """Each strategy's nodes (labels), the MIG profiles their GPUs offer, and the instances pods hold."""
    views = []
    for strategy in strategies:
        nodes = [n for n in inventory.spec.nodes if strategy.selects(n.labels)]
        profiles: set[str] = set()
        held: Counter[str] = Counter()
        for node in nodes:
            model = model_of_product(node.name, node.product)
            profiles |= set(model.profiles) if model.mig_capable else set()
            for device in node.devices:
                held.update(device.in_use)
        views.append(
            PoolView(
                strategy.name,
                tuple(n.name for n in nodes),
                tuple(n.labels for n in nodes),
                frozenset(profiles),
                dict(held),
            )
        )
    return views


def reclaimable_by_pool(
    views: Sequence[PoolView],
    facts: Sequence[GpuNodeFacts],
    activity: Mapping[tuple[str, str], float],
    thresholds: Mapping[str, float],
) -> dict[str, dict[str, int]]:
    """pool -> profile -> held instances whose pod's mean activity stayed below the pool's threshold.
    A pod with no series is not idle: unknown is never reclaimable."""
    pool_of_node = {node: view.name for view in views for node in view.nodes}
    out: dict[str, Counter[str]] = {}
    for node in facts:
        pool = pool_of_node.get(node.name)
        threshold = thresholds.get(pool or "")
        if pool is None or threshold is None:
            continue
        for pod, profiles in node.mig_by_pod.items():
            namespace, _, name = pod.partition("/")
            mean = activity.get((namespace, name))
            if mean is not None and mean < threshold:
                out.setdefault(pool, Counter()).update(profiles)
    return {pool: dict(c) for pool, c in out.items()}


def in_flight(rollout: Mapping[str, Any] | None) -> bool:
    """Whether a pool's last rollout status shows a wave under way or a stop a person must clear."""
    if not rollout:
        return False
    return bool(
        rollout.get("inProgress")
        or rollout.get("draining")
        or rollout.get("pending")
        or rollout.get("stopped")
    )


def rebalance(
    strategies: Sequence[Any],
    inventory: Any,
    facts: Sequence[GpuNodeFacts],
    pods: Sequence[Mapping],
    status: Mapping[str, Any],
    now: datetime,
    *,
    revisions: Mapping[str, str],
    read_activity: ActivityReader | None = None,
) -> RebalanceResult:
    """Measure and decide for every rebalancing pool. `status` is the PolicyRepository's status (its
    `rebalance` and `rollout`); `revisions` the pools' strategy revisions."""
    chosen = sorted(rebalancing_strategies(strategies), key=lambda s: s.name)
    if not chosen:
        return RebalanceResult()
    views = pool_views(chosen, inventory)
    thresholds = {
        s.name: s.spec.partition_strategy.min_utilization_threshold
        for s in chosen
        if s.spec.partition_strategy.min_utilization_threshold is not None
    }
    reclaimable: dict[str, dict[str, int]] = {}
    condition = None
    if thresholds:
        condition, reclaimable = _utilization(chosen, views, facts, thresholds, read_activity, now)
    measured = measure(views, pods, reclaimable)
    requests = {r.name: r for r in pool_requests(chosen, inventory)}
    old = status.get("rebalance") or {}
    rollout = status.get("rollout") or {}
    result = RebalanceResult(condition=condition)
    for strategy in chosen:
        name = strategy.name
        record = carry_over(Record.from_status(old.get(name)), revisions[name])
        request = requests[name]
        settings = settings_of(strategy, len(request.gpus))
        try:
            decision = evaluate(
                request, measured[name], record, settings, now, in_flight=in_flight(rollout.get(name))
            )
        except KgweError as exc:  # a pool the planner refuses keeps its record; the reason is shown
            log.warning("rebalance of pool %s: %s", name, exc)
            decision = Decision(record)
        result.records[name] = decision.record
        if decision.taken:
            result.taken[name] = decision
    return result


def _utilization(
    chosen: Sequence[Any],
    views: Sequence[PoolView],
    facts: Sequence[GpuNodeFacts],
    thresholds: Mapping[str, float],
    read_activity: ActivityReader | None,
    now: datetime,
) -> tuple[Condition, dict[str, dict[str, int]]]:
    pools = ", ".join(sorted(thresholds))
    if read_activity is None:
        return (
            Condition(
                UTILIZATION_CONDITION,
                "False",
                "NotConfigured",
                f"minUtilizationThreshold is set on {pools} but the controller has no --prometheus URL: "
                "rebalancing counts every held instance as demand (allocation only)",
            ),
            {},
        )
    longest = max(
        (s.spec.partition_strategy.rebalance_interval for s in chosen if s.name in thresholds),
        default=timedelta(minutes=5),
    )
    try:
        activity = read_activity(now - longest, now)
    except KgweError as exc:
        return (
            Condition(
                UTILIZATION_CONDITION,
                "False",
                "PrometheusUnavailable",
                f"{exc}; rebalancing counts every held instance as demand (allocation only)",
            ),
            {},
        )
    reclaimable = reclaimable_by_pool(views, facts, activity, thresholds)
    idle = sum(n for c in reclaimable.values() for n in c.values())
    message = f"engine activity read for {len(activity)} pod(s); {idle} held instance(s) below the threshold"
    return Condition(UTILIZATION_CONDITION, "True", "Measured", message), reclaimable
