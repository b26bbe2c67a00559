"""The MIG partition planner: a pool's GPUs + what it should serve -> a target layout per GPU, with reasons.

Objectives, lexicographically: (0) never destroy in-use instances unless the rollout allows drain,
(1) meet counts/demand, then (2) come close to the compute-slice shares, (3) destroy as few in-use
instances as possible when drain is allowed, (4) change as few GPUs as possible, (5) leave few slices idle.
A demand-driven rebalance (`PoolRequest.fewest_changes`) puts (3) and (4) before (2): it serves demand with
the fewest GPUs changed, and the shares only shape the layouts of the GPUs that change.

How it scales: GPUs with the same model, current layout and busyness are interchangeable, so they form one
class; the decision is how many GPUs of each class take each candidate layout (the maximal profile multisets
over the profiles the pool asks for, 12-28 per model). That is a small exact integer program whatever the
pool size; which GPUs of a class change is then chosen to touch as few nodes as possible, because MIG
Manager pauses a whole node for any change on it.
"""

from __future__ import annotations

import functools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from kgwe.errors import KgweError
from kgwe.gpu import catalog
from kgwe.gpu.catalog import GPUModel
from kgwe.gpu.layouts import Layout, check_layout, feasible_multisets, fit
from kgwe.planner import lexmilp
from kgwe.planner.model import GPUPlan, GPUState, PoolPlan, PoolRequest, RolloutLimits

Multiset = tuple[tuple[str, int], ...]
_SHARE_TOLERANCE = 1e-6
_PINNED = "its node was already changed for this strategy revision"


Changes = dict[tuple[str, int], Multiset | None]  # None = disable MIG


@dataclass
class _Class:
    """Interchangeable GPUs: same model, same current profile multiset, same number of busy instances, and
    all pinned or none."""

    model: GPUModel
    current: Layout | None
    busy: int
    gpus: list[GPUState] = field(default_factory=list)
    locked: str = ""  # why the class may not change ("" = free)
    options: list[Multiset] = field(default_factory=list)  # candidate layouts other than keeping


class _Solution(NamedTuple):
    """What the solver decided: per class (aligned with the classes it was given), how many of its GPUs
    get each option (index 0 = keep; [0] for a locked class); and which nodes may change (None = any)."""

    takes: list[list[int]]
    allowed: set[str] | None

    def changed_gpus(self, classes: Sequence[_Class]) -> int:
        return sum(sum(take[1:]) for cls, take in zip(classes, self.takes, strict=True) if not cls.locked)


def _node_index(gpu: GPUState) -> tuple[str, int]:
    return (gpu.node, gpu.index)


def _multiset(layout: Iterable[tuple[str, int]] | None) -> Multiset:
    return _multiset_of(tuple(layout or ()))


@functools.lru_cache(maxsize=4096)
def _multiset_of(layout: tuple[tuple[str, int], ...]) -> Multiset:
    return tuple(sorted(Counter(name for name, _ in layout).items()))


def _ms_text(ms: Multiset | None) -> str:
    if ms is None:
        return "MIG disabled"
    if not ms:
        return "MIG enabled, no instances"
    return " + ".join(name if n == 1 else f"{n}×{name}" for name, n in sorted(ms, key=lambda kv: kv[0]))


def _validate(req: PoolRequest) -> tuple[dict[str, GPUModel], dict[str, int]]:
    """Models by key and compute slices per requested profile; KgweError on anything a user got wrong."""
    models: dict[str, GPUModel] = {}
    seen: set[tuple[str, int]] = set()
    checked: set[tuple[object, ...] | None] = (
        set()
    )  # (model, layout, in_use) already found valid: pools repeat a few states
    for gpu in req.gpus:
        if (gpu.node, gpu.index) in seen:
            raise KgweError(f"pool {req.name}: GPU {gpu.node}/{gpu.index} is listed twice")
        seen.add((gpu.node, gpu.index))
        state: tuple[object, ...] | None = (gpu.model, gpu.layout, gpu.in_use)
        try:
            if state in checked:
                continue
        except TypeError:  # a list layout: check it every time
            state = None
        model = models.get(gpu.model) or models.setdefault(gpu.model, catalog.model_by_key(gpu.model))
        if gpu.layout is not None:
            try:
                check_layout(model, gpu.layout)
            except KgweError as exc:
                where = f"pool {req.name}: GPU {gpu.node}/{gpu.index}"
                raise KgweError(f"{where} current layout: {exc}") from None
        missing = Counter(gpu.in_use) - Counter(gpu.layout or ()) if gpu.in_use else None
        if missing:
            raise KgweError(
                f"pool {req.name}: GPU {gpu.node}/{gpu.index} has in-use instances not in its layout: "
                f"{sorted(missing)}"
            )
        if state is not None:
            checked.add(state)
    mig = [m for m in models.values() if m.mig_capable]
    compute: dict[str, int] = {}
    for kind, mapping in (("shares", req.shares), ("counts", req.counts), ("demand", req.demand)):
        for name, value in mapping.items():
            if not isinstance(value, int | float) or value < 0 or math.isnan(value):
                raise KgweError(f"pool {req.name}: {kind} for {name} must be a number >= 0, got {value!r}")
            if kind != "shares" and value != int(value):
                raise KgweError(f"pool {req.name}: {kind} for {name} must be a whole number, got {value!r}")
            owners = [m for m in mig if name in m.profiles]
            if not owners:
                keys = ", ".join(sorted(m.key for m in mig)) or "no MIG-capable GPUs"
                raise KgweError(f"pool {req.name}: no GPU of this pool offers profile {name!r} ({keys})")
            compute[name] = owners[0].profiles[name].compute_slices
    total_share = sum(req.shares.values())
    if total_share > 1 + _SHARE_TOLERANCE:
        raise KgweError(f"pool {req.name}: profile shares add up to {total_share:.0%}, more than 100%")
    return models, compute


def _classes(req: PoolRequest, models: Mapping[str, GPUModel], wanted: set[str]) -> list[_Class]:
    groups: dict[tuple[object, ...], _Class] = {}
    for gpu in sorted(req.gpus, key=_node_index):
        model = models[gpu.model]
        if not model.mig_capable:
            continue
        current = check_layout(model, gpu.layout) if gpu.layout is not None else None
        # placement does not matter to the decision (mig-parted compares profile counts), only the multiset
        key = (model.key, _multiset_of(current) if current is not None else None, gpu.busy, gpu.pinned)
        cls = groups.get(key)
        if cls is None:
            cls = groups[key] = _Class(model, current, gpu.busy)
            relevant = sorted(wanted & set(model.profiles))
            if gpu.pinned:
                cls.locked = _PINNED
            elif gpu.busy and not req.limits.allow_drain:
                cls.locked = f"{gpu.busy} instance(s) in use and drain is not allowed"
            elif not relevant:
                cls.locked = "the strategy asks for no profile this model offers"
            else:
                here = _multiset(current) if current is not None else None
                cls.options = [ms for ms in _candidates(model, tuple(relevant)) if ms != here]
        cls.gpus.append(gpu)
    return list(groups.values())


@functools.cache
def _candidates(model: GPUModel, profiles: tuple[str, ...]) -> tuple[Multiset, ...]:
    """Maximal multisets over `profiles`: any other layout is dominated (same or fewer instances of each)."""
    return tuple(feasible_multisets(model, profiles, maximal=True))


def _idle(model: GPUModel, ms: Multiset | None) -> int:
    if ms is None:
        return model.compute_slots + model.memory_slots
    used = sum((model.profiles[n].compute_slices + model.profiles[n].memory_slices) * k for n, k in ms)
    return model.compute_slots + model.memory_slots - used


def _solve(
    req: PoolRequest,
    classes: Sequence[_Class],
    required: Mapping[str, float],
    share_target: Mapping[str, float],
    compute: Mapping[str, int],
) -> _Solution:
    """How many GPUs of every free class get each option (index 0 = keep).

    With a node rollout limit, also which nodes may change (None = any): nodes holding the same free GPUs
    are interchangeable, so one integer per node type says how many of them change.
    """
    fixed: Counter[str] = Counter()
    free = [c for c in classes if not c.locked]
    for cls in classes:
        if cls.locked:
            for name, n in _multiset(cls.current) if cls.current is not None else ():
                fixed[name] += n * len(cls.gpus)
    if not free:
        return _Solution([[0] for _ in classes], None)
    columns: list[tuple[_Class, int, Multiset | None]] = []
    for cls in free:
        columns.append((cls, 0, _multiset(cls.current) if cls.current is not None else None))
        columns.extend((cls, j + 1, ms) for j, ms in enumerate(cls.options))
    req_names, share_names = sorted(required), sorted(share_target)
    n_x = len(columns)
    node_types = _node_types(free, req.limits.max_nodes_changed)
    n_s = len(req_names) + len(share_names)
    n_vars = n_x + n_s + len(node_types)
    rows = lexmilp.Rows(n_vars)
    for cls in free:
        rows.add({i: 1.0 for i, (c, _, _) in enumerate(columns) if c is cls}, len(cls.gpus), len(cls.gpus))
    counts = [dict(ms or ()) for _, _, ms in columns]
    tiers = ((n_x, req_names, required), (n_x + len(req_names), share_names, share_target))
    for offset, names, target in tiers:
        for k, name in enumerate(names):
            coefs = {i: float(cnt.get(name, 0)) for i, cnt in enumerate(counts)}
            coefs[offset + k] = 1.0
            rows.add(coefs, target[name] - fixed[name], np.inf)
    changes = np.array([1.0 if j else 0.0 for _, j, _ in columns] + [0.0] * (n_vars - n_x))
    if req.limits.max_gpus_changed is not None:
        rows.add({i: 1.0 for i, (_, j, _) in enumerate(columns) if j}, 0, req.limits.max_gpus_changed)
    if node_types:
        y0 = n_x + n_s
        rows.add({y0 + t: 1.0 for t in range(len(node_types))}, 0, float(req.limits.max_nodes_changed or 0))
        for ci, cls in enumerate(free):
            coefs = {i: 1.0 for i, (c, j, _) in enumerate(columns) if c is cls and j}
            coefs.update({y0 + t: -float(dict(key).get(ci, 0)) for t, (key, _) in enumerate(node_types)})
            rows.add(coefs, -np.inf, 0.0)
    unmet = np.zeros(n_vars)
    unmet[n_x : n_x + len(req_names)] = 1.0
    short = np.zeros(n_vars)
    short[n_x + len(req_names) : n_x + n_s] = [compute[n] for n in share_names]
    destroyed = np.array([float(c.busy) if j else 0.0 for c, j, _ in columns] + [0.0] * (n_vars - n_x))
    idle = np.array([float(_idle(c.model, ms)) for c, _, ms in columns] + [0.0] * (n_vars - n_x))
    nodes_used = np.zeros(n_vars)
    nodes_used[n_x + n_s :] = 1.0
    integral: tuple[bool, ...]
    if req.fewest_changes:  # demand with the fewest GPUs changed; shares shape only the ones that change
        objectives = [unmet, destroyed, changes, short, idle, nodes_used]
        integral = (True, True, True, False, True, True)
    else:
        # changes outrank idle slices: one GPU more changed must cost more than any idle saving
        big = float(max(idle) * sum(len(c.gpus) for c in free)) + 1.0
        objectives = [unmet, short, destroyed, changes * big + idle, nodes_used]
        integral = (True, False, True, True, True)
    upper = np.array(
        [float(len(c.gpus)) for c, _, _ in columns] + [np.inf] * n_s + [float(len(n)) for _, n in node_types]
    )
    integrality = np.array([1] * n_x + [0] * n_s + [1] * len(node_types))
    # every objective but the share shortfall takes whole values at feasible points
    x = lexmilp.solve(objectives, rows, integrality, upper, integral=integral)
    take_of = {id(cls): [0] * (len(cls.options) + 1) for cls in free}
    for i, (cls, j, _) in enumerate(columns):
        take_of[id(cls)][j] = int(x[i])
    takes = [take_of.get(id(cls), [0]) for cls in classes]
    if not node_types:
        return _Solution(takes, None)
    allowed = {node for t, (_, nodes) in enumerate(node_types) for node in nodes[: int(x[n_x + n_s + t])]}
    return _Solution(takes, allowed)


NodeType = tuple[tuple[tuple[int, int], ...], list[str]]


def _node_types(free: Sequence[_Class], limit: int | None) -> list[NodeType]:
    """(free GPUs per class on the node, nodes) for every node type, if a node limit can bind; else []."""
    if limit is None:
        return []
    per_node: dict[str, Counter[int]] = defaultdict(Counter)
    for ci, cls in enumerate(free):
        for gpu in cls.gpus:
            per_node[gpu.node][ci] += 1
    if len(per_node) <= limit:
        return []
    types: dict[tuple[tuple[int, int], ...], list[str]] = defaultdict(list)
    for node in sorted(per_node):
        types[tuple(sorted(per_node[node].items()))].append(node)
    return sorted(types.items())


def _assign(classes: Sequence[_Class], solution: _Solution) -> Changes:
    """Which GPUs of each class change, packing changes onto as few nodes as possible. Deterministic."""
    allowed = solution.allowed
    touched: dict[str, int] = {}  # node -> order in which it was first touched
    out: Changes = {}
    for cls, take in zip(classes, solution.takes, strict=True):
        if cls.locked or not any(take[1:]):
            continue
        per_node: dict[str, list[GPUState]] = defaultdict(list)
        for gpu in cls.gpus:
            if allowed is None or gpu.node in allowed:
                per_node[gpu.node].append(gpu)
        order = sorted(per_node, key=lambda n: (n not in touched, -len(per_node[n]), n))
        chosen = [gpu for node in order for gpu in per_node[node]]
        pos = 0
        for j, ms in enumerate(cls.options, start=1):
            for gpu in chosen[pos : pos + take[j]]:
                out[(gpu.node, gpu.index)] = ms
                touched.setdefault(gpu.node, len(touched))
            pos += take[j]
    return out


def plan_pool(req: PoolRequest) -> PoolPlan:
    """Plan one pool. Pure and deterministic: same request, same plan."""
    if not req.gpus:  # a strategy that selects no node today: nothing to change (validate warns about it)
        return _plan_empty(req)
    models, compute = _validate(req)
    if not req.mig_enabled:
        return _plan_disabled(req, models)
    mig_gpus = [g for g in req.gpus if models[g.model].mig_capable]
    wanted = {n for m in (req.shares, req.counts, req.demand) for n, v in m.items() if v > 0}
    if wanted and not mig_gpus:
        raise KgweError(f"pool {req.name}: the strategy asks for MIG profiles but no GPU of the pool has MIG")
    total_compute = sum(models[g.model].compute_slots for g in mig_gpus)
    share_target = {n: v * total_compute / compute[n] for n, v in req.shares.items() if v > 0}
    required = {
        n: float(max(req.counts.get(n, 0), req.demand.get(n, 0)))
        for n in sorted({*req.counts, *req.demand})
        if max(req.counts.get(n, 0), req.demand.get(n, 0)) > 0
    }
    _check_counts_possible(req, models, mig_gpus)
    classes = _classes(req, models, wanted)
    before = Counter[str]()
    for cls in classes:
        for name, n in _multiset(cls.current) if cls.current is not None else ():
            before[name] += n * len(cls.gpus)
    solution = _solve(req, classes, required, share_target, compute)
    changes = _limit_nodes(_assign(classes, solution), req.limits.max_nodes_changed)
    wanted_change = solution.changed_gpus(classes)
    plan = _report(
        req, models, classes, changes, before, required, share_target, compute, total_compute, wanted_change
    )
    limits = req.limits
    if limits.max_gpus_changed is None and limits.max_nodes_changed is None:
        return plan
    # how far the limits hold the pool back: the same plan without them
    unlimited = replace(req, limits=RolloutLimits(allow_drain=limits.allow_drain))
    free_classes = _classes(unlimited, models, wanted)
    unlimited_solution = _solve(unlimited, free_classes, required, share_target, compute)
    deferred = unlimited_solution.changed_gpus(free_classes) - plan.gpus_changed
    if deferred <= 0:
        return plan
    pairs = ((limits.max_gpus_changed, "GPU(s)"), (limits.max_nodes_changed, "node(s)"))
    caps = [f"{v} {unit}" for v, unit in pairs if v is not None]
    note = f"{deferred} more GPU change(s) wait for later waves (rollout limit: {', '.join(caps)} per plan)"
    return replace(plan, deferred=deferred, notes=(*plan.notes, note))


def _limit_nodes(changes: Changes, limit: int | None) -> Changes:
    if limit is None:
        return changes
    nodes: list[str] = []
    for node, _ in changes:  # insertion order = the order nodes were touched
        if node not in nodes:
            nodes.append(node)
    keep = set(nodes[:limit])
    return {k: v for k, v in changes.items() if k[0] in keep}


def _check_counts_possible(
    req: PoolRequest,
    models: Mapping[str, GPUModel],
    mig_gpus: list[GPUState],
) -> None:
    """Counts the pool could not hold even with every GPU repartitioned are a strategy error, not a plan."""
    if not req.counts:
        return
    fresh = tuple(GPUState(g.node, g.index, g.model) for g in mig_gpus)
    scratch = PoolRequest(req.name, fresh, counts=req.counts)
    wanted = {n for n, v in req.counts.items() if v > 0}
    classes = _classes(scratch, models, wanted)
    required = {n: float(v) for n, v in req.counts.items() if v > 0}
    solution = _solve(scratch, classes, required, {}, {})
    got: Counter[str] = Counter()
    for cls, take in zip(classes, solution.takes, strict=True):
        for j, ms in enumerate(cls.options, start=1):
            for name, n in ms:
                got[name] += n * take[j]
    short = {n: int(v) - got[n] for n, v in required.items() if got[n] < v}
    if short:
        text = ", ".join(f"{n}: {int(required[n])} asked, at most {got[n]}" for n in sorted(short))
        raise KgweError(f"pool {req.name}: the counts cannot fit on its {len(mig_gpus)} GPUs ({text})")


def _report(
    req: PoolRequest,
    models: Mapping[str, GPUModel],
    classes: Sequence[_Class],
    changes: Changes,
    before: Mapping[str, int],
    required: Mapping[str, float],
    share_target: Mapping[str, float],
    compute: Mapping[str, int],
    total_compute: int,
    wanted_change: int,
) -> PoolPlan:
    """The plan of every GPU of the pool for `changes`; `wanted_change` GPUs would change without limits."""
    names_wanted = sorted({*required, *share_target})
    want = {n: max(required.get(n, 0.0), share_target.get(n, 0.0)) for n in names_wanted}
    why = {n: f"pool had {before.get(n, 0)} of {_num(want[n])} wanted" for n in want}
    locked_of = {(g.node, g.index): c.locked for c in classes if c.locked for g in c.gpus}
    plans: list[GPUPlan] = []
    reasons: dict[tuple[Any, ...], str] = {}
    fitted: dict[tuple[str, Multiset], Layout] = {}
    targets: Counter[tuple[str, Layout]] = Counter()  # (model, MIG target layout) -> GPUs: summed once below
    kept = destroyed = 0
    for gpu in sorted(req.gpus, key=_node_index):
        model = models[gpu.model]
        current = check_layout(model, gpu.layout) if gpu.layout is not None and model.mig_capable else None
        key = (gpu.node, gpu.index)
        changed = key in changes
        if changed:
            ms = changes[key]
            if ms is None:
                target = None
            else:
                target = fitted.get((model.key, ms))
                if target is None:
                    placed = fit(model, [n for n, k in ms for _ in range(k)])
                    assert placed is not None, "a candidate multiset always fits"
                    target = fitted[(model.key, ms)] = placed
            old = _multiset_of(current) if current is not None else None
            reason_key = (old, ms, gpu.busy)
            reason = reasons.get(reason_key)
            if reason is None:
                reason = reasons[reason_key] = _change_reason(old, ms, why, gpu.busy)
            destroyed += gpu.busy
        else:
            target = current
            locked = locked_of.get(key)
            if not model.mig_capable:
                reason = f"{model.key} does not support MIG"
            elif locked:
                reason = f"kept: {locked}"
            else:
                reason = "kept: already serves the strategy as well as a change would"
            kept += gpu.busy
        if target is not None:
            targets[(gpu.model, target)] += 1
        plans.append(
            GPUPlan(
                gpu.node,
                gpu.index,
                gpu.model,
                current,
                target,
                changed,
                in_use_destroyed=gpu.busy if changed else 0,
                reason=reason,
            )
        )
    achieved: Counter[str] = Counter()
    idle_c = idle_m = 0
    for (model_key, target), n in targets.items():
        model = models[model_key]
        idle_c += n * model.compute_slots
        idle_m += n * model.memory_slots
        for inst in target:
            achieved[inst.profile] += n
            idle_c -= n * model.profiles[inst.profile].compute_slices
            idle_m -= n * model.profiles[inst.profile].memory_slices
    deferred = max(0, wanted_change - len(changes))
    notes: list[str] = []
    names = sorted({*want, *achieved})
    return PoolPlan(
        name=req.name,
        gpus=tuple(plans),
        target_shares={n: float(req.shares.get(n, 0.0)) for n in names},
        achieved_shares={
            n: achieved[n] * compute.get(n, _compute_of(models, n)) / total_compute if total_compute else 0.0
            for n in names
        },
        wanted_counts={n: math.ceil(want.get(n, 0.0) - _SHARE_TOLERANCE) for n in names},
        achieved_counts={n: achieved[n] for n in names},
        unmet={n: int(v) - achieved[n] for n, v in required.items() if achieved[n] < v},
        gpus_changed=len(changes),
        nodes_changed=len({node for node, _ in changes}),
        in_use_kept=kept,
        in_use_destroyed=destroyed,
        deferred=deferred,
        idle_compute_slices=idle_c,
        idle_memory_slices=idle_m,
        total_compute_slices=total_compute,
        notes=tuple(notes),
    )


def _num(value: float) -> str:
    return f"{value:.0f}" if value >= 100 or value == int(value) else f"{value:.1f}"


def _compute_of(models: Mapping[str, GPUModel], name: str) -> int:
    for model in models.values():
        if name in model.profiles:
            return model.profiles[name].compute_slices
    return 0


def _change_reason(old: Multiset | None, new: Multiset | None, why: Mapping[str, str], busy: int) -> str:
    if new is None:
        text = f"{_ms_text(old)} -> MIG disabled: the strategy runs these GPUs whole"
        return text + (f"; drains {busy} in-use workload(s) (drain allowed)" if busy else "")
    delta = Counter(dict(new))
    delta.subtract(Counter(dict(old or ())))
    gained = [f"+{k} {n} ({why[n]})" if n in why else f"+{k} {n}" for n, k in sorted(delta.items()) if k > 0]
    lost = [f"-{-k} {n}" for n, k in sorted(delta.items()) if k < 0]
    text = f"{_ms_text(old)} -> {_ms_text(new)}: " + ", ".join(gained + lost)
    if old is None:
        text = "enable MIG; " + text
    if busy:
        text += f"; drains {busy} in-use workload(s) (drain allowed)"
    return text


def _plan_empty(req: PoolRequest) -> PoolPlan:
    """The plan of a pool with no GPUs: targets as asked, nothing achieved, nothing changed."""
    return PoolPlan(
        name=req.name,
        gpus=(),
        target_shares=dict(req.shares),
        achieved_shares={},
        wanted_counts={**req.counts, **req.demand},
        achieved_counts={},
        unmet={},
        gpus_changed=0,
        nodes_changed=0,
        in_use_kept=0,
        in_use_destroyed=0,
        deferred=0,
        idle_compute_slices=0,
        idle_memory_slices=0,
        total_compute_slices=0,
        notes=("the strategy selects no GPU node",),
    )


def _plan_disabled(req: PoolRequest, models: Mapping[str, GPUModel]) -> PoolPlan:
    """A strategy with MIG off: disable it on every GPU that has it, unless that would kill a workload."""
    if req.shares or req.counts or req.demand:
        raise KgweError(f"pool {req.name}: MIG is disabled, so the strategy cannot ask for MIG profiles")
    classes = []
    changes: Changes = {}
    for gpu in sorted(req.gpus, key=lambda g: (g.node, g.index)):
        if gpu.layout is None or not models[gpu.model].mig_capable:
            continue
        if gpu.pinned or (gpu.busy and not req.limits.allow_drain):
            cls = _Class(models[gpu.model], None, gpu.busy, [gpu])
            cls.locked = _PINNED if gpu.pinned else f"{gpu.busy} instance(s) in use and drain is not allowed"
            classes.append(cls)
            continue
        changes[(gpu.node, gpu.index)] = None
    if req.limits.max_gpus_changed is not None:
        changes = dict(list(changes.items())[: req.limits.max_gpus_changed])
    changes = _limit_nodes(changes, req.limits.max_nodes_changed)
    total = sum(models[g.model].compute_slots for g in req.gpus if models[g.model].mig_capable)
    wanting = sum(1 for g in req.gpus if g.layout is not None and models[g.model].mig_capable)
    plan = _report(req, models, classes, changes, Counter(), {}, {}, {}, total, wanted_change=0)
    deferred = wanting - len(changes) - sum(len(c.gpus) for c in classes)
    return replace(
        plan,
        deferred=deferred,
        notes=(f"{deferred} GPU change(s) deferred by rollout limits",) if deferred else (),
    )


def plan_pools(requests: Iterable[PoolRequest]) -> list[PoolPlan]:
    """Plan several pools; a GPU may belong to one pool only."""
    seen: dict[tuple[str, int], str] = {}
    plans = []
    for req in requests:
        for gpu in req.gpus:
            other = seen.setdefault((gpu.node, gpu.index), req.name)
            if other != req.name:
                raise KgweError(f"GPU {gpu.node}/{gpu.index} is in both pool {other} and pool {req.name}")
        plans.append(plan_pool(req))
    return plans
