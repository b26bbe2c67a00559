"""Thin adapter: policy objects (MIGStrategy + GPUInventory, kgwe.policy's pydantic models) -> planner input,
and plans -> the per-node layouts `migparted.build_mig_configs` takes. The planner core never sees pydantic.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kgwe.errors import KgweError
from kgwe.gpu import catalog
from kgwe.gpu.catalog import GPUModel
from kgwe.gpu.layouts import Layout, fit, primary_profiles
from kgwe.planner.model import GPUState, PoolPlan, PoolRequest, RolloutLimits
from kgwe.planner.plan import plan_pools
from kgwe.vocab import CONFIG_NAME_PREFIX, MIG_ALL_DISABLED

if TYPE_CHECKING:
    from kgwe.policy.inventory import GPUInventory, InventoryNode
    from kgwe.policy.mig_strategy import MIGStrategy, MIGStrategySpec

_COUNTED = re.compile(r"(\d+)x(.+)")


@dataclass(frozen=True)
class PolicyPlan:
    """Plans per pool (one per MIGStrategy, by name) and node -> per-GPU layouts of every planned node."""

    pools: tuple[PoolPlan, ...]
    layouts: Mapping[str, list[list[str] | None]]


def model_of_product(node_name: str, product: str) -> GPUModel:
    """The catalog model of a node's GFD product label; KgweError if it names none or several."""
    model = catalog.model_for_product(product)
    if model is not None:
        return model
    found = catalog.models_matching(product)
    if len(found) == 1:
        return found[0]
    if not found:
        raise KgweError(f"node {node_name}: GPU product {product!r} is not in the GPU catalog")
    keys = ", ".join(m.key for m in found)
    raise KgweError(f"node {node_name}: GPU product {product!r} is ambiguous ({keys}); use the GFD product")


_UNKNOWN = object()


def layout_from_config(model: GPUModel, config: str | None) -> list[str] | object | None:
    """The per-GPU layout a uniform `nvidia.com/mig.config` value stands for (operator defaults and KGWE's
    own `kgwe-all-...` names); `_UNKNOWN` when the name says nothing we can decode."""
    if not config or not model.mig_capable:
        return _UNKNOWN
    name = config.removeprefix(CONFIG_NAME_PREFIX)
    if name == MIG_ALL_DISABLED:
        return None
    if name == "all-enabled":
        return []
    if name == "all-balanced":
        small = primary_profiles(model)[::-1]  # 1g, 2g, 3g, ...
        return [small[0].name] * 2 + [small[1].name] + ([small[2].name] if model.compute_slots == 7 else [])
    by_label = {p.name.replace("+", "."): p for p in model.profiles.values()}
    rest = name.removeprefix("all-")
    if rest in by_label:
        profile = by_label[rest]
        return [profile.name] * profile.max_count
    parts = [m for part in rest.split("-") if (m := _COUNTED.fullmatch(part)) and m.group(2) in by_label]
    if config.startswith(f"{CONFIG_NAME_PREFIX}all-") and len(parts) == len(rest.split("-")):
        return [by_label[m.group(2)].name for m in parts for _ in range(int(m.group(1)))]
    return _UNKNOWN


@functools.lru_cache(maxsize=4096)
def _placed(model: GPUModel, names: tuple[str, ...]) -> Layout | None:
    """Where a GPU's current instances sit (None: they do not fit); a fleet repeats a few layouts, so each
    is placed once. KgweError for a profile the model does not have."""
    for name in names:
        model.profile(name)
    return fit(model, names)


def _gpu_states(node: InventoryNode, model: GPUModel, pinned: bool = False) -> list[GPUState]:
    states = []
    layouts = node.current_layouts()
    if not node.devices:  # no per-GPU detail: the node's mig.config label tells what it runs
        implied = layout_from_config(model, node.mig_config)
        if isinstance(implied, list) or implied is None:
            layouts = [None if implied is None else tuple(implied)] * node.gpus
    in_use = node.in_use()
    sick = node.unhealthy_gpus()
    for index in range(node.gpus):
        names = layouts[index]
        busy = in_use[index]
        keep = pinned or index in sick  # an unhealthy GPU keeps what it has: nothing is planned onto it
        if names is None or not model.mig_capable:
            whole = busy == ("gpu",) or bool(busy)
            states.append(GPUState(node.name, index, model.key, None, (), whole, keep))
            continue
        placed = _placed(model, tuple(names))
        if placed is None:
            raise KgweError(f"node {node.name} GPU {index}: {list(names)} do not fit on one {model.key}")
        held: list[tuple[str, int]] = []
        if busy:  # most GPUs hold nothing: no Counter for them
            want = Counter(busy)
            for inst in placed:
                if want[inst.profile] > 0:
                    want[inst.profile] -= 1
                    held.append(inst)
        states.append(GPUState(node.name, index, model.key, placed, tuple(held), pinned=keep))
    return states


def wave_nodes(spec: MIGStrategySpec, pool_size: int) -> int:
    """How many nodes of a pool one rollout wave may change (the strategy's maxUnavailable)."""
    return spec.rollout.max_unavailable_nodes(pool_size)


def pool_requests(
    strategies: Sequence[MIGStrategy],
    inventory: GPUInventory,
    demand: Mapping[str, Mapping[str, int]] | None = None,
    *,
    waves: bool = False,
    pinned: Collection[str] = (),
    fewest_changes: Collection[str] = (),
) -> list[PoolRequest]:
    """One PoolRequest per MIGStrategy; each inventory node joins the strategy whose nodeSelector matches it.

    `demand` maps a strategy name to profile -> instances wanted (pending pods, forecast). With `waves`, each
    pool changes at most its maxUnavailable nodes (the next rollout wave) instead of planning its end state.
    `pinned` nodes keep their current layouts (already changed for this revision of their strategy).
    Pools named in `fewest_changes` meet their demand with the fewest GPUs changed (a rebalance decision).
    """
    demand = demand or {}
    unknown = sorted(set(demand) - {s.metadata.name for s in strategies})
    if unknown:
        raise KgweError(f"demand names no MIGStrategy: {', '.join(unknown)}")
    owner: dict[str, str] = {}
    requests = []
    for strategy in sorted(strategies, key=lambda s: s.metadata.name):
        name = strategy.metadata.name
        nodes = [n for n in inventory.spec.nodes if strategy.selects(n.labels)]
        gpus: list[GPUState] = []
        for node in nodes:
            other = owner.setdefault(node.name, name)
            if other != name:
                raise KgweError(f"node {node.name} is selected by both MIGStrategy {other} and {name}")
            model = model_of_product(node.name, node.product)
            gpus.extend(_gpu_states(node, model, node.name in pinned))
        spec = strategy.spec
        partition = spec.partition_strategy
        shares = {p: float(v) / 100 for p, v in partition.shares.items()} if partition else {}
        counts = dict(partition.counts) if partition else {}
        # Plan the pool's end state; the controller's rollout (kgwe/reconcile/rollout.py) paces it in waves of
        # maxUnavailable nodes, so its status counts progress against the whole target, not one wave.
        limits = RolloutLimits(
            max_nodes_changed=wave_nodes(spec, len(nodes)) if waves else None, allow_drain=spec.rollout.drain
        )
        requests.append(
            PoolRequest(
                name,
                tuple(gpus),
                shares=shares,
                counts=counts,
                demand=dict(demand.get(name, {})),
                limits=limits,
                mig_enabled=spec.mig_enabled,
                fewest_changes=name in fewest_changes,
            )
        )
    return requests


def plan_policy(
    strategies: Iterable[MIGStrategy],
    inventory: GPUInventory,
    demand: Mapping[str, Mapping[str, int]] | None = None,
    *,
    waves: bool = False,
    pinned: Collection[str] = (),
    fewest_changes: Collection[str] = (),
) -> PolicyPlan:
    """Plan every MIGStrategy's pool of `inventory` and collect the node layouts for mig-parted."""
    requests = pool_requests(
        list(strategies), inventory, demand, waves=waves, pinned=pinned, fewest_changes=fewest_changes
    )
    plans = plan_pools(requests)
    layouts: dict[str, list[list[str] | None]] = {}
    for plan in plans:
        layouts.update(plan.layouts_by_node())
    return PolicyPlan(tuple(plans), dict(sorted(layouts.items())))


def plan_layouts(
    strategies: Iterable[MIGStrategy],
    inventory: GPUInventory,
    *,
    pinned: Collection[str] = (),
    demand: Mapping[str, Mapping[str, int]] | None = None,
    fewest_changes: Collection[str] = (),
) -> dict[str, list[list[str] | None]]:
    """node -> per-GPU profile lists (None = MIG disabled), as `kgwe render` feeds `build_mig_configs`.
    `demand`: the rebalancing targets in force (strategy -> profile -> instances); `fewest_changes`: the
    pools whose target came from a decision that serves demand with the fewest changes."""
    plan = plan_policy(strategies, inventory, demand, pinned=pinned, fewest_changes=fewest_changes)
    return dict(plan.layouts)
