"""GPUInventory: a snapshot of GPU nodes, so render/plan/simulate run offline exactly as in the cluster.

Per node:
  name        node name
  labels      node labels (GFD labels included) - MIGStrategy/PricingCatalog selectors match these
  gpus        number of physical GPUs
  product     GFD `nvidia.com/gpu.product` of the full GPU (e.g. NVIDIA-H100-80GB-HBM3)
  topology    a known topology name (kgwe.topology.known, e.g. DGX-H100, DGX-A100, L40S-8-PCIE)
  migConfig / migConfigState
              current `nvidia.com/mig.config` and `nvidia.com/mig.config.state` label values
  devices     optional per-GPU current state, for realistic offline planning:
                index   GPU index (0..gpus-1), each at most once; GPUs not listed have MIG disabled and idle
                mig     current MIG instances (profile names); omitted/null = MIG disabled; [] = enabled, none
                inUse   MIG instances held by running pods (a sub-multiset of `mig`)
                busy    the whole GPU is held by a pod (only with MIG disabled)
                unhealthy  the agent reports the GPU unhealthy (kgwe.nvidia.io/gpu-health): the MIG planner
                        leaves its layout as it is and plans nothing onto it
migDemand   optional, per rebalancing MIG pool (MIGStrategy name): the MIG demand measured when the snapshot
            was taken (docs/mig-rebalancing.md), for `kgwe plan`'s preview of the next rebalance:
                pending  profile -> instances unschedulable pods asked for
                pendingPods  profile -> how many pods those were
                target   profile -> the demand target in force
                epoch    rebalance decisions taken for the strategy's revision
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StringConstraints, model_validator

from kgwe.policy.base import DnsSubdomain, KgweModel, KgweObject, ObjectMeta
from kgwe.policy.mig_strategy import MIG_PROFILE_PATTERN
from kgwe.policy.types import LabelMap, LabelValue

MigConfigState = Literal["pending", "rebooting", "success", "failed"]


class GPUDeviceState(KgweModel):
    """One GPU's current state."""

    index: int = Field(ge=0)
    """The GPU index (0 to gpus-1), each at most once; GPUs not listed have MIG disabled and are idle."""
    mig: list[str] | None = None
    """The GPU's current MIG instances (profile names); absent: MIG disabled; `[]`: enabled, none."""
    in_use: list[str] = Field(default_factory=list)
    """MIG instances pods hold (some of `mig`), never destroyed unless the strategy drains."""
    busy: bool = False
    """A pod holds the whole (MIG-disabled) GPU."""
    unhealthy: bool = False
    """The agent reports the GPU unhealthy (`kgwe.nvidia.io/gpu-health`): the MIG planner keeps its layout
    and plans nothing onto it."""

    @model_validator(mode="after")
    def _consistent(self) -> GPUDeviceState:
        if self.mig is None:
            if self.in_use:
                raise ValueError("inUse lists MIG instances but the GPU has MIG disabled (no `mig`)")
        else:
            if self.busy:
                raise ValueError("busy is for whole GPUs; with MIG enabled list the held instances in inUse")
            missing = Counter(self.in_use) - Counter(self.mig) if self.in_use else None
            if missing:
                raise ValueError(f"inUse names instances not in `mig`: {sorted(missing.elements())}")
        return self


class InventoryNode(KgweModel):
    """One GPU node."""

    name: DnsSubdomain
    """The node's name; unique."""
    labels: LabelMap = Field(default_factory=dict)
    """The node's labels, GFD's included (what MIGStrategy and PricingCatalog selectors match)."""
    gpus: int = Field(ge=1, le=64)
    """Physical GPUs on the node (1-64)."""
    product: LabelValue
    """GFD `nvidia.com/gpu.product` of the full GPU (a label value), e.g. `NVIDIA-H100-80GB-HBM3`."""
    topology: str | None = None
    """A known topology (`DGX-H100`, `DGX-A100`, `L40S-8-PCIE`, ...); its GPU count must match `gpus`."""
    mig_config: str | None = None
    """The node's current `nvidia.com/mig.config` label."""
    mig_config_state: MigConfigState | None = None
    """The node's current `nvidia.com/mig.config.state` label."""
    devices: list[GPUDeviceState] = Field(default_factory=list)
    """Per GPU, its current state, for realistic offline planning."""

    @model_validator(mode="after")
    def _devices_in_range(self) -> InventoryNode:
        seen: set[int] = set()
        for d in self.devices:
            if d.index >= self.gpus:
                raise ValueError(f"devices: GPU index {d.index} but the node has {self.gpus} GPUs")
            if d.index in seen:
                raise ValueError(f"devices: GPU index {d.index} listed twice")
            seen.add(d.index)
        return self

    def current_layouts(self) -> list[tuple[str, ...] | None]:
        """Per GPU index: the current MIG instances (None = MIG disabled)."""
        out: list[tuple[str, ...] | None] = [None] * self.gpus
        for d in self.devices:
            out[d.index] = None if d.mig is None else tuple(d.mig)
        return out

    def unhealthy_gpus(self) -> frozenset[int]:
        """GPU indices the agent reports unhealthy."""
        return frozenset(d.index for d in self.devices if d.unhealthy)

    def in_use(self) -> list[tuple[str, ...]]:
        """Per GPU index: instances held by pods ("gpu" stands for a whole busy GPU)."""
        out: list[tuple[str, ...]] = [()] * self.gpus
        for d in self.devices:
            out[d.index] = ("gpu",) if d.busy else tuple(d.in_use)
        return out


MAX_INSTANCES = 1_000_000  # more MIG instances than any cluster has: a bound, not a limit anyone meets
ProfileName = Annotated[str, StringConstraints(pattern=MIG_PROFILE_PATTERN)]
ProfileCounts = dict[ProfileName, Annotated[int, Field(ge=0, le=MAX_INSTANCES)]]


class PoolDemand(KgweModel):
    """One rebalancing pool's measured MIG demand (see the module docstring)."""

    pending: ProfileCounts = Field(default_factory=dict)
    """Per MIG profile, the instances unschedulable pods asked for."""
    pending_pods: ProfileCounts = Field(default_factory=dict)
    """Per MIG profile, how many pods those were."""
    target: ProfileCounts = Field(default_factory=dict)
    """Per MIG profile, the demand target in force."""
    epoch: int = Field(default=0, ge=0)
    """Rebalance decisions taken for the strategy's current revision."""


class GPUInventorySpec(KgweModel):
    """The GPU nodes, and the MIG demand measured per rebalancing pool."""

    cluster: str | None = None
    """The cluster's name (in reports)."""
    nodes: list[InventoryNode] = Field(default_factory=list)
    """The GPU nodes."""
    mig_demand: dict[DnsSubdomain, PoolDemand] = Field(default_factory=dict)
    """Per rebalancing MIG pool (MIGStrategy name), the MIG demand the controller measured when it took
    the snapshot; `kgwe plan` previews the next rebalance from it (docs/mig-rebalancing.md)."""


class GPUInventory(KgweObject):
    """A snapshot of a cluster's GPU nodes, so render, plan and simulate run offline as in the cluster."""

    KIND: ClassVar[str] = "GPUInventory"
    kind: Literal["GPUInventory"] = "GPUInventory"
    metadata: ObjectMeta
    spec: GPUInventorySpec
    """The nodes and the measured MIG demand."""

    def node(self, name: str) -> InventoryNode | None:
        return next((n for n in self.spec.nodes if n.name == name), None)
