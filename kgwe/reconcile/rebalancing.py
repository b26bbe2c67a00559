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
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from kgwe.cluster.inventory import GpuNodeFacts
from kgwe.cost.utilization import reclaimable_pods
from kgwe.errors import KgweError
from kgwe.planner.from_policy import model_of_product, pool_requests
from kgwe.planner.mig_demand import PoolView, measure, unschedulable_mig_request
from kgwe.planner.model import PoolRequest
from kgwe.planner.plan import plan_pool
from kgwe.planner.rebalance import (
    Decision,
    Measurement,
    Outlook,
    Record,
    Sample,
    Settings,
    carry_over,
    evaluate,
)
from kgwe.policy.cluster_kinds import Condition
from kgwe.policy.inventory import GPUInventory, PoolDemand
from kgwe.policy.mig_strategy import MIGStrategy
from kgwe.runtime.conditions import find
from kgwe.timestamps import parse_rfc3339

log = logging.getLogger(__name__)

UTILIZATION_CONDITION = "UtilizationAvailable"

# (namespace, pod) -> mean engine activity over [start, end]; raises KgweError when the source is down
ActivityReader = Callable[[datetime, datetime], Mapping[tuple[str, str], float]]
# the pools as measured -> the demand the optimizer expects of each (kgwe.optimizer.demand); a pool without
# one follows pending pods alone
OutlookSource = Callable[[Sequence[PoolView]], Mapping[str, Outlook]]


@dataclass
class RebalanceResult:
    """The records in force per pool (for planning and status), the decisions taken now (for Events), and
    the utilization condition (None when no pool asks for utilization)."""

    records: dict[str, Record] = field(default_factory=dict)
    taken: dict[str, Decision] = field(default_factory=dict)
    condition: Condition | None = None

    def status(self) -> dict[str, dict[str, Any]]:
        return {pool: record.to_status() for pool, record in sorted(self.records.items())}


def rebalancing_strategies(strategies: Sequence[MIGStrategy]) -> list[MIGStrategy]:
    """The MIGStrategies with rebalancing on (a partition strategy with rebalanceInterval)."""
    return [
        s
        for s in strategies
        if s.spec.partition_strategy is not None and s.spec.partition_strategy.rebalance_interval is not None
    ]


def unschedulable_profiles(pods: Sequence[Mapping[str, Any]]) -> set[str]:
    """The MIG profiles unschedulable pods ask for (whatever pool may serve them)."""
    return {profile for pod in pods for profile, _ in unschedulable_mig_request(pod)}


def settings_of(strategy: MIGStrategy, pool_gpus: int) -> Settings:
    """The rebalance settings of one of `rebalancing_strategies`."""
    partition = strategy.spec.partition_strategy
    interval = partition.rebalance_interval if partition is not None else None
    window = partition.stabilization_window if partition is not None else None
    if partition is None or interval is None or window is None:
        raise KgweError(f"MIGStrategy {strategy.name} does not rebalance (no rebalanceInterval)")
    return Settings(
        interval=interval,
        window=window,
        max_gpus=partition.max_gpus_per_rebalance(pool_gpus),
    )


def pool_views(strategies: Sequence[MIGStrategy], inventory: GPUInventory) -> list[PoolView]:
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
    since: datetime,
) -> dict[str, dict[str, int]]:
    """pool -> profile -> held instances whose pod's mean activity stayed below the pool's threshold. Only
    pods running since `since` (the start of the measured interval) count: a pod that just started has too
    few points to call idle, and unknown is never reclaimable (kgwe.cost.utilization)."""
    pool_of_node = {node: view.name for view in views for node in view.nodes}
    out: dict[str, Counter[str]] = {}
    for node in facts:
        pool = pool_of_node.get(node.name)
        threshold = thresholds.get(pool or "")
        if pool is None or threshold is None:
            continue
        held = {}
        for key, profiles in node.mig_by_pod.items():
            started = parse_rfc3339(node.pod_started.get(key))
            if started is not None and started <= since:
                namespace, _, name = key.partition("/")
                held[(namespace, name)] = profiles
        for pod in reclaimable_pods(activity, held, threshold):
            out.setdefault(pool, Counter()).update(held[pod])
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
    strategies: Sequence[MIGStrategy],
    inventory: GPUInventory,
    facts: Sequence[GpuNodeFacts],
    pods: Sequence[Mapping[str, Any]],
    status: Mapping[str, Any],
    now: datetime,
    *,
    revisions: Mapping[str, str],
    read_activity: ActivityReader | None = None,
    outlooks: OutlookSource | None = None,
) -> RebalanceResult:
    """Measure and decide for every rebalancing pool. `status` is the PolicyRepository's status (its
    `rebalance` and `rollout`); `revisions` the pools' strategy revisions; `outlooks` the optimizer's
    expected demand per pool (None, or a pool left out: the reactive rule)."""
    chosen = sorted(rebalancing_strategies(strategies), key=lambda s: s.name)
    if not chosen:
        return RebalanceResult()
    views = pool_views(chosen, inventory)
    thresholds = {
        s.name: threshold
        for s in chosen
        if s.spec.partition_strategy is not None
        and (threshold := s.spec.partition_strategy.min_utilization_threshold) is not None
    }
    reclaimable: dict[str, dict[str, int]] = {}
    condition = None
    if thresholds:
        condition, reclaimable = _utilization(chosen, views, facts, thresholds, read_activity, now)
    measured = measure(views, pods, reclaimable)
    expected = _outlooks(outlooks, views)
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
                request,
                measured[name],
                record,
                settings,
                now,
                in_flight=in_flight(rollout.get(name)),
                outlook=expected.get(name),
            )
        except KgweError as exc:  # a pool the planner refuses keeps its record; the reason is shown
            log.warning("rebalance of pool %s: %s", name, exc)
            decision = Decision(record)
        result.records[name] = decision.record
        if decision.taken:
            result.taken[name] = decision
    return result


def _outlooks(source: OutlookSource | None, views: Sequence[PoolView]) -> Mapping[str, Outlook]:
    """The optimizer's outlooks; none when it fails (a model is advice: the reactive rule decides)."""
    if source is None:
        return {}
    try:
        return source(views)
    except Exception:
        log.exception("MIG demand outlook failed; rebalancing follows pending pods alone")
        return {}


def records_in_force(
    chosen: Sequence[MIGStrategy],
    status: Mapping[str, Any],
    unscheduled: Sequence[Mapping[str, Any]],
    now: datetime,
    revisions: Mapping[str, str],
) -> RebalanceResult | None:
    """The records in force while no pool's evaluation is due (with the utilization condition as status
    last showed it); None when one is due: its interval passed, its strategy changed, it has no record yet,
    or pods wait for a MIG profile no record counts as pending."""
    old = status.get("rebalance") or {}
    stored = {s.name: Record.from_status(old.get(s.name)) for s in chosen}
    held = {s.name: carry_over(stored[s.name], revisions[s.name]) for s in chosen}
    seen = {p for r in held.values() for p, n in r.pending.items() if n > 0}
    due = bool(unschedulable_profiles(unscheduled) - seen) or any(
        (r := stored[s.name]) is None
        or r.revision != revisions[s.name]
        or r.evaluated_at is None
        or now - r.evaluated_at >= s.spec.partition_strategy.rebalance_interval
        for s in chosen
        if s.spec.partition_strategy is not None and s.spec.partition_strategy.rebalance_interval is not None
    )
    if due:
        return None
    previous = find(status.get("conditions"), UTILIZATION_CONDITION)
    condition = (
        Condition(
            type=previous["type"],
            status=previous["status"],
            reason=previous.get("reason"),
            message=previous.get("message"),
        )
        if previous
        else None
    )
    return RebalanceResult(records=held, condition=condition)


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
                type=UTILIZATION_CONDITION,
                status="False",
                reason="NotConfigured",
                message=f"minUtilizationThreshold is set on {pools} but the controller has no --prometheus "
                "URL: rebalancing counts every held instance as demand (allocation only)",
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
                type=UTILIZATION_CONDITION,
                status="False",
                reason="PrometheusUnavailable",
                message=f"{exc}; rebalancing counts every held instance as demand (allocation only)",
            ),
            {},
        )
    reclaimable = reclaimable_by_pool(views, facts, activity, thresholds, now - longest)
    idle = sum(n for c in reclaimable.values() for n in c.values())
    message = f"engine activity read for {len(activity)} pod(s); {idle} held instance(s) below the threshold"
    measured = Condition(type=UTILIZATION_CONDITION, status="True", reason="Measured", message=message)
    return measured, reclaimable


@dataclass(frozen=True)
class PoolPreview:
    """What the next rebalance of one pool would do: the decision (None: no measured demand to go by)."""

    pool: str
    decision: Decision | None
    note: str = ""


def snapshot_demand(records: Mapping[str, Record]) -> dict[str, dict[str, Any]]:
    """The GPUInventory snapshot's `migDemand`: what `preview` needs, and nothing that changes every
    evaluation (timestamps, samples), so an unchanged demand never makes a new snapshot commit."""
    return {
        pool: {
            "pending": dict(sorted(r.pending.items())),
            "pendingPods": dict(sorted(r.pending_pods.items())),
            "target": dict(sorted(r.target.items())),
            "epoch": r.epoch,
        }
        for pool, r in sorted(records.items())
    }


def live_demand(
    strategies: Sequence[MIGStrategy], inventory: GPUInventory, pods: Sequence[Mapping[str, Any]]
) -> dict[str, PoolDemand]:
    """`migDemand` for an inventory read from a live cluster: the pending demand its pods show now (no
    decision record: the target in force is the controller's, in its PolicyRepository's status)."""
    chosen = rebalancing_strategies(strategies)
    measured = measure(pool_views(chosen, inventory), pods)
    return {
        pool: PoolDemand(pending=dict(m.pending), pending_pods=dict(m.pending_pods))
        for pool, m in sorted(measured.items())
    }


def rolled_out(request: PoolRequest, target: Mapping[str, int]) -> PoolRequest:
    """The pool once the strategy's own plan (with the demand target in force) has rolled out: the
    controller decides a rebalance only when no wave is in flight. Busy GPUs keep their layouts."""
    plan = plan_pool(replace(request, demand=dict(target)))
    planned = {(g.node, g.index): g for g in plan.changes()}
    gpus = []
    for gpu in request.gpus:
        change = planned.get((gpu.node, gpu.index))
        if change is None:
            gpus.append(gpu)
            continue
        layout = tuple((i.profile, i.start) for i in change.target) if change.target is not None else None
        gpus.append(replace(gpu, layout=layout, in_use=(), whole_gpu_in_use=False))
    return replace(request, gpus=tuple(gpus))


def preview(strategies: Sequence[MIGStrategy], inventory: GPUInventory, now: datetime) -> list[PoolPreview]:
    """The next rebalance of every rebalancing pool of `strategies`, offline: the pool as the strategy
    plans it, the inventory's `migDemand` (measured when it was taken) assumed to hold until the next
    decision, the demand target in force its latest sample, and the decision due. Pure."""
    chosen = sorted(rebalancing_strategies(strategies), key=lambda s: s.name)
    if not chosen:
        return []
    measured = inventory.spec.mig_demand
    views = {v.name: v for v in pool_views(chosen, inventory)}
    requests = {r.name: r for r in pool_requests(chosen, inventory)}
    out = []
    for strategy in chosen:
        name = strategy.name
        demand = measured.get(name)
        if demand is None:
            out.append(PoolPreview(name, None, "the inventory has no measured demand for this pool"))
            continue
        target = dict(demand.target)
        record = Record("preview", epoch=demand.epoch, target=target, samples=(Sample(now, target),))
        measurement = Measurement(
            pending=dict(demand.pending),
            in_use=dict(views[name].held),
            pending_pods=dict(demand.pending_pods),
        )
        settings = settings_of(strategy, len(requests[name].gpus))
        try:
            decision = evaluate(rolled_out(requests[name], target), measurement, record, settings, now)
        except KgweError as exc:
            out.append(PoolPreview(name, None, f"cannot plan: {exc}"))
            continue
        out.append(PoolPreview(name, decision))
    return out
