"""Plain-data input and output of the MIG planner (no pydantic: the core must not depend on policy models)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kgwe.gpu.layouts import Layout

PlacedLayout = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GPUState:
    """One GPU as it is now. `layout` None = MIG disabled; () = MIG enabled without instances.

    `in_use` lists the (profile, start) instances pods hold; `whole_gpu_in_use` marks a MIG-disabled GPU
    held by a pod. mig-parted wipes every instance of a GPU it reconfigures (docs/facts/mig.md §4), so any
    change to a GPU destroys all of its in-use instances. `pinned` GPUs keep their layout: their node's change
    for the pool's current strategy has started, and a node changes at most once per strategy revision.
    """

    node: str
    index: int
    model: str
    layout: PlacedLayout | None = None
    in_use: PlacedLayout = ()
    whole_gpu_in_use: bool = False
    pinned: bool = False

    @property
    def busy(self) -> int:
        """How many workloads a reconfiguration of this GPU would kill."""
        return len(self.in_use) + (1 if self.whole_gpu_in_use else 0)


@dataclass(frozen=True)
class RolloutLimits:
    """How much one plan may change. None = unlimited. Drain lets the plan destroy in-use instances."""

    max_gpus_changed: int | None = None
    max_nodes_changed: int | None = None
    allow_drain: bool = False


@dataclass(frozen=True)
class PoolRequest:
    """What one pool should serve.

    shares: profile -> fraction (0..1] of the pool's compute slices (MIGStrategy preferredProfiles).
    counts: profile -> instances the pool must have. demand: profile -> instances wanted now (pending pods
    plus forecast). Counts and demand outrank shares; shares shape whatever capacity is left.
    Profile names are counted across models by name, as the device plugin advertises them.
    """

    name: str
    gpus: tuple[GPUState, ...]
    shares: Mapping[str, float] = field(default_factory=dict)
    counts: Mapping[str, int] = field(default_factory=dict)
    demand: Mapping[str, int] = field(default_factory=dict)
    limits: RolloutLimits = field(default_factory=RolloutLimits)
    mig_enabled: bool = True  # False: the pool runs whole GPUs; the plan disables MIG where it is on
    # True: meet counts/demand with the fewest GPUs changed, shares only shaping the GPUs that change (a
    # demand-driven rebalance, kgwe.planner.rebalance); False: shares outrank changes (the strategy's plan)
    fewest_changes: bool = False


@dataclass(frozen=True)
class GPUPlan:
    """The planned layout of one GPU and why."""

    node: str
    index: int
    model: str
    current: Layout | None
    target: Layout | None
    changed: bool
    in_use_destroyed: int
    reason: str

    @property
    def target_profiles(self) -> list[str] | None:
        """Profile names for mig-parted (None = MIG disabled)."""
        return None if self.target is None else [i.profile for i in self.target]


@dataclass(frozen=True)
class PoolPlan:
    """A pool's plan and the figures a person checks it by."""

    name: str
    gpus: tuple[GPUPlan, ...]
    target_shares: Mapping[str, float]
    achieved_shares: Mapping[str, float]
    wanted_counts: Mapping[str, int]
    achieved_counts: Mapping[str, int]
    unmet: Mapping[str, int]
    gpus_changed: int
    nodes_changed: int
    in_use_kept: int
    in_use_destroyed: int
    deferred: int
    idle_compute_slices: int
    idle_memory_slices: int
    total_compute_slices: int
    notes: tuple[str, ...] = ()

    def layouts_by_node(self) -> dict[str, list[list[str] | None]]:
        """node -> per-GPU-index profile lists, the input of `migparted.build_mig_configs`.

        Indices missing from the pool (GPUs not in it) are reported as MIG disabled.
        """
        nodes: dict[str, dict[int, list[str] | None]] = {}
        for gpu in self.gpus:
            nodes.setdefault(gpu.node, {})[gpu.index] = gpu.target_profiles
        return {
            node: [by_index.get(i) for i in range(max(by_index) + 1)]
            for node, by_index in sorted(nodes.items())
        }

    def changes(self) -> list[GPUPlan]:
        return [g for g in self.gpus if g.changed]
