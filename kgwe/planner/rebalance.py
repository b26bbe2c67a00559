"""Demand-driven MIG rebalancing: when a pool's layout should follow what its pods ask for, and when not.

Pure: the controller measures demand (kgwe/reconcile/rebalancing.py), this module decides, the planner
(`plan_pool`) says which GPUs change, and the ordinary rollout carries the change out under the strategy's
gates. What is held between decisions is a `Record`, kept in the PolicyRepository's status so a new leader
continues where the last one stopped.

The rule (docs/mig-rebalancing.md):
- demand per profile = instances held (less those whose pods stay below `minUtilizationThreshold`) plus
  instances that unschedulable pods ask for;
- the demand in force is the peak over the stabilization window: demand that rises is followed at the next
  decision, demand that falls only once it has stayed low for the whole window (no flip-flop);
- a decision is taken at most once per `rebalanceInterval`, never while a wave of the pool is in flight;
- while pods are pending, a change serves them with as few GPUs changed as it can (the shares only shape
  the layouts of the GPUs that change), at most `rebalanceMaxGPUs`, and is taken only if it serves at least
  one pending instance per GPU it repartitions;
- with nothing pending, a target that fell by at least one GPU's compute slices is followed back towards
  the preferred shares, under the same cap; a smaller fall keeps the target;
- between decisions, only the nodes the last decision named may change: the pool stays as decided;
- with an `Outlook` (the demand the optimizer expects, kgwe.optimizer.demand), idle GPUs are prepared for
  it before pods queue — only when a change covers at least PREPARE_SLICES_PER_GPU compute slices of the
  expected demand per GPU it repartitions, the GPUs that change shaped by the expected mix; the layout so
  decided becomes the target in force (the rollout plans the named nodes for it, as for measured demand),
  and nothing is released back towards the shares while the outlook expects the demand. Without an outlook
  (no history, a model that is unsure) the rule is exactly the one above.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from kgwe.gpu import catalog
from kgwe.gpu.catalog import GPUModel
from kgwe.planner.model import GPUState, PoolPlan, PoolRequest
from kgwe.planner.plan import plan_pool
from kgwe.timestamps import format_rfc3339, parse_rfc3339

MAX_SAMPLES = 64  # a window of 64 decisions' measurements is plenty; status stays small
MAX_NODES_IN_MESSAGE = 5


@dataclass(frozen=True)
class Settings:
    """A pool's rebalancing knobs, from its MIGStrategy (kgwe/policy/mig_strategy.py)."""

    interval: timedelta
    window: timedelta
    max_gpus: int


# An outlook prepares a pool for a share of its capacity in the expected mix (the rest stays as the shares
# and the measured demand make it), and only by changes that cover this many compute slices of the expected
# demand per GPU repartitioned (about two thirds of a 7-slice GPU): a churn guard like the reactive rule's.
PREPARE_FILL = 0.9
PREPARE_SLICES_PER_GPU = 5


@dataclass(frozen=True)
class Outlook:
    """The demand a pool should be ready for over the next hours (kgwe.optimizer.demand): `level` the
    instances per profile its pods are expected to hold at the peak, `mix` each profile's expected share of
    the compute slices pods will hold, and `reason`, said in the decision's message."""

    level: Mapping[str, int] = field(default_factory=dict)
    mix: Mapping[str, float] = field(default_factory=dict)
    reason: str = ""

    def target(self, request: PoolRequest) -> dict[str, int]:
        """Instances per profile to prepare: the expected peak, and PREPARE_FILL of the pool's compute
        slices in the expected mix, whichever is more (never more than the pool holds)."""
        sizes = _profile_slices(request)
        capacity = sum(m.compute_slots for m in _gpu_models(request))
        total = sum(v for p, v in self.mix.items() if v > 0 and p in sizes)
        out: dict[str, int] = {}
        for profile, size in sizes.items():
            share = self.mix.get(profile, 0.0) / total if total > 0 else 0.0
            filled = int(share * PREPARE_FILL * capacity // size)
            want = max(self.level.get(profile, 0), filled)
            if want > 0:
                out[profile] = want
        used = sum(n * sizes[p] for p, n in out.items())
        if used > capacity > 0:  # an outlook never asks for more than the pool: scaled down, in proportion
            out = {p: n * capacity // used for p, n in out.items() if n * capacity // used > 0}
        return dict(sorted(out.items()))


@dataclass(frozen=True)
class Measurement:
    """What a pool's pods hold and ask for now, per MIG profile (instances).

    `reclaimable` is the part of `in_use` whose pods stayed below the utilization threshold over the
    interval (0 without a utilization source); `pending_pods` counts the unschedulable pods behind `pending`.
    """

    pending: Mapping[str, int] = field(default_factory=dict)
    in_use: Mapping[str, int] = field(default_factory=dict)
    reclaimable: Mapping[str, int] = field(default_factory=dict)
    pending_pods: Mapping[str, int] = field(default_factory=dict)

    def demand(self) -> dict[str, int]:
        """Instances the pool should hold for its pods now."""
        out: dict[str, int] = {}
        for profile in sorted({*self.pending, *self.in_use}):
            held = self.in_use.get(profile, 0) - min(
                self.reclaimable.get(profile, 0), self.in_use.get(profile, 0)
            )
            wanted = held + self.pending.get(profile, 0)
            if wanted > 0:
                out[profile] = wanted
        return out


@dataclass(frozen=True)
class Sample:
    at: datetime
    demand: Mapping[str, int]


@dataclass(frozen=True)
class Record:
    """What rebalancing holds for one pool between decisions (one entry of status.rebalance).

    `revision` is the strategy revision the record belongs to; `epoch` counts decisions (0 = none yet for
    this revision: the pool follows its strategy alone); `target` is the demand in force; `nodes` are the
    nodes the last decision may change.
    """

    revision: str
    epoch: int = 0
    target: Mapping[str, int] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()
    decided_at: datetime | None = None
    evaluated_at: datetime | None = None
    samples: tuple[Sample, ...] = ()
    pending: Mapping[str, int] = field(default_factory=dict)
    pending_pods: Mapping[str, int] = field(default_factory=dict)
    message: str = ""
    grow: bool = True  # the last decision served demand with the fewest changes (False: back to the shares)

    def rollout_revision(self) -> str:
        """The revision nodes changed under this record are annotated with (one change per decision)."""
        return self.revision if self.epoch == 0 else f"{self.revision}.r{self.epoch}"

    def to_status(self) -> dict[str, object]:
        out: dict[str, object] = {
            "revision": self.revision,
            "epoch": self.epoch,
            "target": dict(sorted(self.target.items())),
        }
        out["nodes"] = list(self.nodes)
        out["decidedAt"] = format_rfc3339(self.decided_at) if self.decided_at else None
        out["evaluatedAt"] = format_rfc3339(self.evaluated_at) if self.evaluated_at else None
        out["samples"] = [
            {"at": format_rfc3339(s.at), "demand": dict(sorted(s.demand.items()))} for s in self.samples
        ]
        out["pending"] = dict(sorted(self.pending.items()))
        out["pendingPods"] = dict(sorted(self.pending_pods.items()))
        out["message"] = self.message
        out["mode"] = "grow" if self.grow else "release"
        return out

    @classmethod
    def from_status(cls, data: object) -> Record | None:
        """The record as status holds it; None when it is missing or not what this code writes."""
        if not isinstance(data, Mapping) or not isinstance(data.get("revision"), str):
            return None
        try:
            samples = tuple(
                Sample(_timestamp(s["at"]), _counts(s.get("demand")))
                for s in data.get("samples") or []
                if isinstance(s, Mapping) and s.get("at")
            )
            return cls(
                revision=data["revision"],
                epoch=int(data.get("epoch") or 0),
                target=_counts(data.get("target")),
                nodes=tuple(str(n) for n in data.get("nodes") or []),
                decided_at=_time(data.get("decidedAt")),
                evaluated_at=_time(data.get("evaluatedAt")),
                samples=samples[-MAX_SAMPLES:],
                pending=_counts(data.get("pending")),
                pending_pods=_counts(data.get("pendingPods")),
                message=str(data.get("message") or ""),
                grow=data.get("mode", "grow") != "release",
            )
        except (TypeError, ValueError, KeyError):
            return None


def _time(value: object) -> datetime | None:
    return _timestamp(value) if value else None


def _timestamp(value: object) -> datetime:
    parsed = parse_rfc3339(str(value))
    if parsed is None:
        raise ValueError(f"not a timestamp: {value!r}")
    return parsed


def _counts(value: object) -> dict[str, int]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): int(v) for k, v in value.items() if int(v) > 0}


@dataclass(frozen=True)
class Decision:
    """The record to keep, and when a new target was taken: the plan it makes and the Event to say why."""

    record: Record
    taken: bool = False
    plan: PoolPlan | None = None
    event: str | None = None


def carry_over(record: Record | None, revision: str) -> Record:
    """The record for the strategy's current revision: a new revision starts at epoch 0 (the commit's plan
    rolls out first) but keeps the measured demand, which is a fact about pods, not about the policy."""
    if record is None:
        return Record(revision)
    if record.revision == revision:
        return record
    return Record(
        revision,
        target=record.target,
        samples=record.samples,
        pending=record.pending,
        pending_pods=record.pending_pods,
    )


def due(record: Record, measurement: Measurement, settings: Settings, now: datetime) -> bool:
    """Whether to evaluate now: every interval, and at once when pods start pending for a profile the last
    evaluation saw none pending for (new demand does not wait for the interval to come round)."""
    if record.evaluated_at is None or now - record.evaluated_at >= settings.interval:
        return True
    return any(n > 0 and record.pending.get(p, 0) == 0 for p, n in measurement.pending.items())


def evaluate(
    request: PoolRequest,
    measurement: Measurement,
    record: Record,
    settings: Settings,
    now: datetime,
    *,
    in_flight: bool = False,
    outlook: Outlook | None = None,
) -> Decision:
    """Decide whether `request`'s pool takes a new demand target now.

    `request` is the pool as it is (no node frozen by an earlier decision: a decision may pick any idle
    GPU); `record` is `carry_over`'s; `in_flight` says a rollout wave of the pool has not finished;
    `outlook` is the demand expected (None: the reactive rule alone).
    """
    if not due(record, measurement, settings, now):
        return Decision(record)
    pending = {p: n for p, n in measurement.pending.items() if n > 0}
    pods = {p: n for p, n in measurement.pending_pods.items() if n > 0}
    samples = (
        *[s for s in record.samples if now - s.at < settings.window],
        Sample(now, measurement.demand()),
    )
    samples = samples[-MAX_SAMPLES:]
    candidate = _peak(samples)
    evaluated = replace(record, evaluated_at=now, samples=samples, pending=pending, pending_pods=pods)
    if in_flight:
        return Decision(replace(evaluated, message="waiting for the rollout wave in flight"))
    if record.decided_at is not None and now - record.decided_at < settings.interval:
        wait = record.decided_at + settings.interval
        return Decision(
            replace(evaluated, message=f"next decision at {format_rfc3339(wait)} (one per interval)")
        )
    limits = replace(request.limits, max_gpus_changed=settings.max_gpus, max_nodes_changed=None)
    free = replace(request, gpus=idle_nodes_only(request), demand=candidate, limits=limits)
    if outlook is not None:  # the GPUs that change take the expected mix, not the shares
        free = replace(free, shares=_mix_shares(outlook, request))
    if pending:
        plan = plan_pool(replace(free, fewest_changes=True))
        gain = served(plan, measurement) - served_now(request, measurement)
        if gain >= max(1, plan.gpus_changed):
            target = candidate if outlook is None else _decided(plan)
            return _take(evaluated, plan, target, now, _pending_text(measurement), grow=True)
        said = _not_taken(request, measurement, gain, plan)
        if outlook is None:
            return Decision(replace(evaluated, message=said))
        return _prepare(request, free, evaluated, outlook, candidate, now, said)
    if outlook is not None:  # the demand expected holds the layout; idle GPUs are prepared for it
        return _prepare(request, free, evaluated, outlook, candidate, now, "no pending MIG demand")
    fallen = {p: n - candidate.get(p, 0) for p, n in sorted(record.target.items()) if candidate.get(p, 0) < n}
    if not fallen:
        return Decision(replace(evaluated, message="no pending MIG demand"))
    what = ", ".join(f"{p} {record.target[p]} -> {candidate.get(p, 0)}" for p in fallen)
    if _slices(request, fallen) < _gpu_slices(request):
        held = f"demand fell by less than one GPU's worth ({what}): the target holds"
        return Decision(replace(evaluated, message=held))
    plan = plan_pool(replace(free, fewest_changes=False))  # back towards the shares, capped
    why = f"demand fell for the whole stabilization window ({what})"
    if not plan.gpus_changed:  # a lower target alone: nothing to roll out, no decision to announce
        lowered = replace(evaluated, target=candidate, message=f"{why}; no GPU needs a new layout")
        return Decision(lowered)
    return _take(evaluated, plan, candidate, now, why, grow=False)


def _prepare(
    request: PoolRequest,
    free: PoolRequest,
    evaluated: Record,
    outlook: Outlook,
    candidate: Mapping[str, int],
    now: datetime,
    said: str,
) -> Decision:
    """Prepare idle GPUs for the outlook's target when the change is worth it (PREPARE_SLICES_PER_GPU of
    expected demand covered per GPU changed); else keep the layout and say why."""
    want = outlook.target(request)
    target = {p: max(n, candidate.get(p, 0)) for p, n in {**candidate, **want}.items()}
    sizes = _profile_slices(request)
    before = _covered(_offered(request), target, sizes)
    short = sum(n * sizes.get(p, 0) for p, n in target.items()) - before
    if short <= 0:
        return Decision(replace(evaluated, message=f"{said}; the layout is ready for the demand expected"))
    shaped = replace(free, demand=target, shares=_mix_shares(outlook, request), fewest_changes=True)
    plan = plan_pool(shaped)
    gain = _covered(plan.achieved_counts, target, sizes) - before
    if not plan.gpus_changed or gain < PREPARE_SLICES_PER_GPU * plan.gpus_changed:
        kept = f"{said}; preparing for the demand expected would cover {gain} slice(s) with "
        return Decision(
            replace(evaluated, message=f"{kept}{plan.gpus_changed} GPU(s): not worth the disruption")
        )
    expected = ", ".join(f"{p} {n}" for p, n in sorted(want.items()))
    why = (
        f"preparing for the demand expected ({expected}; {outlook.reason})"
        if outlook.reason
        else (f"preparing for the demand expected ({expected})")
    )
    return _take(evaluated, plan, _decided(plan), now, why, grow=True)


def _decided(plan: PoolPlan) -> dict[str, int]:
    """The layout a decision shaped by the expected mix made, as the target in force: the rollout plans the
    named nodes for the target with the strategy's shares, so the mix's shaping travels as instances."""
    return {p: n for p, n in sorted(plan.achieved_counts.items()) if n > 0}


def _mix_shares(outlook: Outlook, request: PoolRequest) -> dict[str, float]:
    """The expected mix as shares, shaping the GPUs a preparation changes (the strategy's shares without
    a mix over the pool's profiles)."""
    sizes = _profile_slices(request)
    mix = {p: v for p, v in outlook.mix.items() if v > 0 and p in sizes}
    total = sum(mix.values())
    return {p: v / total for p, v in sorted(mix.items())} if total > 0 else dict(request.shares)


def _offered(request: PoolRequest) -> dict[str, int]:
    have: Counter[str] = Counter()
    for gpu in request.gpus:
        for profile, _ in gpu.layout or ():
            have[profile] += 1
    return dict(have)


def _covered(have: Mapping[str, int], target: Mapping[str, int], sizes: Mapping[str, int]) -> int:
    """Compute slices of `target` that instances in `have` cover."""
    return sum(min(n, have.get(p, 0)) * sizes.get(p, 0) for p, n in target.items())


def _gpu_models(request: PoolRequest) -> list[GPUModel]:
    """The MIG model of each GPU of the pool (one entry per GPU)."""
    models = {m.key: m for m in _mig_models(request)}
    return [models[g.model] for g in request.gpus if g.model in models]


def _profile_slices(request: PoolRequest) -> dict[str, int]:
    """Compute slices of each profile the pool's GPUs offer (its size on the first model offering it)."""
    out: dict[str, int] = {}
    for model in _mig_models(request):
        for name, profile in model.profiles.items():
            out.setdefault(name, profile.compute_slices)
    return out


def _take(
    evaluated: Record, plan: PoolPlan, target: Mapping[str, int], now: datetime, why: str, *, grow: bool
) -> Decision:
    nodes = tuple(sorted({g.node for g in plan.changes()}))
    message = f"{why}; {_action_text(plan, nodes)}"
    taken = replace(
        evaluated,
        epoch=evaluated.epoch + 1,
        target=dict(target),
        nodes=nodes,
        decided_at=now,
        message=message,
        grow=grow,
    )
    return Decision(taken, taken=True, plan=plan, event=message)


def _not_taken(request: PoolRequest, measurement: Measurement, gain: int, plan: PoolPlan) -> str:
    pending = _pending_text(measurement)
    if served_now(request, measurement) >= sum(measurement.pending.values()):
        return (
            f"{pending}; the pool has free instances for them (they wait for something else: a node "
            "selector, a busy node, a rollout)"
        )
    if gain < 1:
        return f"{pending}; no layout within the limits serves more of it"
    return (
        f"{pending}; would serve {gain} by repartitioning {plan.gpus_changed} GPU(s): not worth the "
        "disruption (at least one pending instance per GPU changed)"
    )


def _mig_models(request: PoolRequest) -> list[GPUModel]:
    keys = sorted({g.model for g in request.gpus})
    return [m for m in (catalog.model_by_key(k) for k in keys) if m.mig_capable]


def _slices(request: PoolRequest, instances: Mapping[str, int]) -> int:
    """Compute slices `instances` take (a profile's size on the first model of the pool offering it)."""
    models = _mig_models(request)
    total = 0
    for profile, n in instances.items():
        owner = next((m for m in models if profile in m.profiles), None)
        total += n * (owner.profiles[profile].compute_slices if owner else 0)
    return total


def _gpu_slices(request: PoolRequest) -> int:
    """One GPU's compute slices (the smallest MIG model of the pool): the unit a release must free."""
    return min((m.compute_slots for m in _mig_models(request)), default=1)


def idle_nodes_only(request: PoolRequest) -> tuple[GPUState, ...]:
    """The pool's GPUs with every GPU of a node that holds a workload pinned, unless the strategy drains:
    the MIG manager reconfigures a node only when nothing runs on it, and KGWE relabels only such nodes,
    so a decision that picked an idle GPU beside a busy one would wait for that workload to end."""
    if request.limits.allow_drain:
        return request.gpus
    busy = {g.node for g in request.gpus if g.busy}
    if not busy:
        return request.gpus
    return tuple(replace(g, pinned=True) if g.node in busy and not g.pinned else g for g in request.gpus)


def _peak(samples: Sequence[Sample]) -> dict[str, int]:
    peak: Counter[str] = Counter()
    for sample in samples:
        for profile, n in sample.demand.items():
            peak[profile] = max(peak[profile], n)
    return {p: n for p, n in sorted(peak.items()) if n > 0}


def served(plan: PoolPlan, measurement: Measurement) -> int:
    """Pending instances the plan's layouts could serve beside what pods hold now."""
    return sum(
        min(n, max(0, plan.achieved_counts.get(p, 0) - measurement.in_use.get(p, 0)))
        for p, n in measurement.pending.items()
    )


def served_now(request: PoolRequest, measurement: Measurement) -> int:
    """Pending instances the pool's current layouts could serve (free instances of the asked profiles)."""
    have: Counter[str] = Counter()
    for gpu in request.gpus:
        for profile, _ in gpu.layout or ():
            have[profile] += 1
    return sum(min(n, max(0, have[p] - measurement.in_use.get(p, 0))) for p, n in measurement.pending.items())


def _pending_text(m: Measurement) -> str:
    pods = m.pending_pods or m.pending
    parts = [f"{n} pending {p} pod{'s' if n != 1 else ''}" for p, n in sorted(pods.items()) if n > 0]
    return ", ".join(parts) or "no pending MIG demand"


def _action_text(plan: PoolPlan, nodes: Sequence[str]) -> str:
    if not plan.gpus_changed:
        return "no GPU needs a new layout"
    busy = plan.in_use_destroyed
    kind = "idle " if not busy else ""
    shown = ", ".join(nodes[:MAX_NODES_IN_MESSAGE]) + (", ..." if len(nodes) > MAX_NODES_IN_MESSAGE else "")
    text = f"repartitioning {plan.gpus_changed} {kind}GPU{'s' if plan.gpus_changed != 1 else ''} on {shown}"
    if busy:
        text += f" (drains {busy} in-use instance(s): the strategy allows drain)"
    return text
