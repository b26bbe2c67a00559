"""GPUSharingStrategy: time-slicing or MPS for the GPUs of one node pool (docs/spec/gpusharingstrategy.md).

Rendered the GPU Operator way: one NVIDIA device-plugin config per strategy (`version: v1` with
`sharing.timeSlicing` or `sharing.mps`) and the node label `nvidia.com/device-plugin.config` naming it. One
strategy has one mode, so a rendered config never carries both sections (the plugin would silently drop
time-slicing; docs/facts/sharing.md §1).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from kgwe.policy.base import KgweModel, KgweObject, ObjectMeta
from kgwe.policy.mig_strategy import Rollout
from kgwe.policy.types import LabelMap

SharingMode = Literal["TimeSlicing", "MPS"]  # kgwe.gpu.sharing.GFD_STRATEGY maps them
# The device plugin refuses fewer than 2 replicas ("number of replicas must be >= 2").
MIN_REPLICAS = 2
# MPS clients per GPU (docs/facts/sharing.md §4): 48 from compute capability 7.5 (Volta: 16).
MPS_MAX_CLIENTS = 48
MPS_MAX_CLIENTS_BELOW_7_5 = 16
MPS_FULL_LIMIT_CAPABILITY = (7, 5)
# A sanity bound for time-slicing (each replica is one schedulable slot; the plugin sets no limit).
MAX_REPLICAS = 256


class GPUSharingStrategySpec(KgweModel):
    """The pool, the sharing mode and its replicas, and how a change rolls out."""

    node_selector: LabelMap = Field(default_factory=dict)
    """The pool: nodes carrying all these labels. Two sharing strategies may not claim the same node, nor
    a MIGStrategy with `migEnabled: true`."""
    mode: SharingMode
    """Rendered as the device-plugin config's `sharing.timeSlicing` or `sharing.mps`; a config never
    carries both (the plugin would silently ignore time-slicing)."""
    replicas: int
    """Replicas per physical GPU, at least 2 (the plugin refuses fewer); with `MPS` at most 48 clients per
    GPU, 16 below compute capability 7.5 (V100)."""
    rename_by_default: bool = False
    """Advertise the replicas as `nvidia.com/gpu.shared` instead of `nvidia.com/gpu` (pods must ask for the
    shared name)."""
    fail_requests_greater_than_one: bool | None = None
    """The plugin refuses a pod asking more than one replica (more replicas of a time-sliced GPU give no
    more of it). Default, as the plugin's: `false` for `TimeSlicing`, `true` for `MPS`."""
    rollout: Rollout = Field(default_factory=Rollout)
    """How fast the pool switches; a node has switched when GFD reports the new sharing (labels
    `nvidia.com/gpu.replicas`, `nvidia.com/gpu.sharing-strategy`), and `pendingTimeout` defaults to 15m."""

    @model_validator(mode="before")
    @classmethod
    def _one_mode(cls, data: object) -> object:
        if isinstance(data, dict) and {"timeSlicing", "mps"} <= set(data):
            raise ValueError(
                "one strategy shares its GPUs one way: write `mode: TimeSlicing` or `mode: MPS` "
                "(a device-plugin config with both silently drops time-slicing)"
            )
        return data

    @field_validator("replicas")
    @classmethod
    def _replicas_bounds(cls, value: int) -> int:
        if value < MIN_REPLICAS:
            raise ValueError(f"replicas must be >= {MIN_REPLICAS} (the device plugin refuses {value})")
        if value > MAX_REPLICAS:
            raise ValueError(f"replicas must be <= {MAX_REPLICAS}, got {value}")
        return value

    @property
    def fails_requests_greater_than_one(self) -> bool:
        """What the plugin does: the field if set, else true for MPS and false for time-slicing."""
        if self.fail_requests_greater_than_one is not None:
            return self.fail_requests_greater_than_one
        return self.mode == "MPS"


class GPUSharingStrategy(KgweObject):
    """Time-slicing or MPS for the GPUs of one node pool, rendered as an NVIDIA device-plugin config and the
    node label naming it."""

    KIND: ClassVar[str] = "GPUSharingStrategy"
    kind: Literal["GPUSharingStrategy"] = "GPUSharingStrategy"
    metadata: ObjectMeta
    spec: GPUSharingStrategySpec
    """The pool, the mode and the rollout."""

    def selects(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.spec.node_selector.items())
