"""Target MIG layouts per node for rendering: the MIG planner when it is available, else a simple placement.

The simple placement gives every node of a pool one uniform layout, chosen node by node among the maximal
profile multisets that fit one GPU so the pool's compute-slice shares approach the strategy's. It is always
valid (multisets come from kgwe.gpu.layouts) but ignores in-use instances; the planner does better.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from kgwe.gpu import catalog
from kgwe.gpu.layouts import feasible_multisets
from kgwe.policy.models import GPUInventory, MIGStrategy

NodeLayouts = dict[str, list[list[str] | None]]


def _target_shares(strategy: MIGStrategy, profiles: Mapping[str, int]) -> dict[str, float]:
    """profile -> fraction of compute slices; counts are turned into the shares they imply."""
    part = strategy.spec.partition_strategy
    assert part is not None
    if part.uses_counts:
        slices = {p: c * profiles[p] for p, c in part.counts.items() if p in profiles}
        total = sum(slices.values()) or 1
        return {p: s / total for p, s in slices.items()}
    return {p: float(v / Decimal(100)) for p, v in part.shares.items() if p in profiles}


def _pool_layouts(strategy: MIGStrategy, nodes: Sequence, out: NodeLayouts) -> None:
    by_model: dict[str, list] = {}
    for node in nodes:
        model = catalog.model_for_product(node.product)
        if model is not None and model.mig_capable:
            by_model.setdefault(model.key, []).append((model, node))
    part = strategy.spec.partition_strategy
    assert part is not None
    wanted = [s.profile for s in part.preferred_profiles]
    for members in by_model.values():
        model = members[0][0]
        names = [p for p in wanted if p in model.profiles]
        if not names:
            continue
        slices = {p: model.profiles[p].compute_slices for p in names}
        target = _target_shares(strategy, slices)
        candidates = feasible_multisets(model, names, maximal=True)
        vectors = [{p: c * slices[p] for p, c in ms} for ms in candidates]
        totals = dict.fromkeys(names, 0)
        for _, node in members:
            best, best_cost = 0, None
            for i, vec in enumerate(vectors):
                after = {p: totals[p] + node.gpus * vec.get(p, 0) for p in names}
                whole = sum(after.values()) or 1
                cost = sum(abs(after[p] / whole - target.get(p, 0.0)) for p in names)
                if best_cost is None or cost < best_cost - 1e-12:
                    best, best_cost = i, cost
            for p, s in vectors[best].items():
                totals[p] += node.gpus * s
            layout = sorted(
                (p for p, c in candidates[best] for _ in range(c)),
                key=lambda p: (-model.profiles[p].compute_slices, p),
            )
            out[node.name] = [list(layout) for _ in range(node.gpus)]


def simple_layouts(strategies: Sequence[MIGStrategy], inventory: GPUInventory) -> NodeLayouts:
    out: NodeLayouts = {}
    for strategy in sorted(strategies, key=lambda s: s.name):
        nodes = [n for n in sorted(inventory.spec.nodes, key=lambda n: n.name) if strategy.selects(n.labels)]
        nodes = [n for n in nodes if n.name not in out]  # overlapping strategies are a validation error
        if not strategy.spec.mig_enabled:
            for node in nodes:
                out[node.name] = [None] * node.gpus
        else:
            _pool_layouts(strategy, nodes, out)
    return out


def desired_layouts(strategies: Sequence[MIGStrategy], inventory: GPUInventory) -> NodeLayouts:
    """node -> per-GPU layout (None = MIG disabled) for every node a MIGStrategy selects.

    Uses `kgwe.planner.from_policy.plan_layouts(strategies, inventory)` when the planner provides it."""
    try:
        from kgwe.planner import from_policy  # type: ignore[attr-defined]
    except ImportError:
        from_policy = None
    plan = getattr(from_policy, "plan_layouts", None)
    if plan is not None:
        return {k: list(v) for k, v in plan(strategies, inventory).items()}
    return simple_layouts(strategies, inventory)
