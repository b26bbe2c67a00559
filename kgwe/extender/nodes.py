"""Per-node GPU state as plain data: what the watch index, the static inventory and the simulator produce."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kgwe.topology.model import NodeTopology

UNLIMITED = 1 << 60  # CPU / memory not tracked (static inventories): never the reason a node fails


@dataclass
class NodeState:
    """One node. `gpu_used_milli[i]` is the share of physical GPU i already held (1000 = taken whole)."""

    name: str
    gpus: int = 0
    gpu_used_milli: list[int] = field(default_factory=list)
    product: str = ""
    family: str = ""
    model: str = ""  # catalog key or trace model code (e.g. "H100-80GB", "G2")
    gpu_memory_mib: int = 0
    mig_free: dict[str, int] = field(default_factory=dict)  # profile -> free instances
    cpu_milli: int = UNLIMITED
    cpu_used_milli: int = 0
    memory_mib: int = UNLIMITED
    memory_used_mib: int = 0
    priority: float = 0.0  # 0..100, label kgwe.nvidia.io/node-priority (Priority strategy)
    topology: NodeTopology | None = None  # scored by the chooser/scorer the engine installs
    labels: Mapping[str, str] = field(default_factory=dict)
    unhealthy: Mapping[int, str] = field(default_factory=dict)  # GPU index -> reason (agent's gpu-health)
    replicas: int = 1  # schedulable replicas per physical GPU (device-plugin time-slicing / MPS)

    def __post_init__(self) -> None:
        if len(self.gpu_used_milli) < self.gpus:
            self.gpu_used_milli = list(self.gpu_used_milli) + [0] * (self.gpus - len(self.gpu_used_milli))
        elif len(self.gpu_used_milli) > self.gpus:
            self.gpu_used_milli = list(self.gpu_used_milli[: self.gpus])
