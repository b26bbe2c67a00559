"""Target MIG layouts per node for rendering, as the MIG planner decides them."""

from __future__ import annotations

from collections.abc import Sequence

from kgwe.planner.from_policy import plan_layouts
from kgwe.policy.models import GPUInventory, MIGStrategy

NodeLayouts = dict[str, list[list[str] | None]]


def desired_layouts(strategies: Sequence[MIGStrategy], inventory: GPUInventory) -> NodeLayouts:
    """node -> per-GPU layout (None = MIG disabled) for every node a MIGStrategy selects."""
    return {k: list(v) for k, v in plan_layouts(strategies, inventory).items()}
