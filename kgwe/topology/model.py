"""One node's GPU interconnect as plain, hashable data.

`NodeTopology` is what every other area passes around (annotation, choice, extender, simulator): frozen
tuples, no handles, no I/O; the hot-path code in `kgwe.topology.choice` works on its precomputed bandwidth
matrix.

Bandwidth estimates (GB/s, one direction; docs/facts/topology.md §2):
- NVLink: links x per-link rate (NVLink1 20, NVLink2-4 25, NVLink5 50). On NVSwitch systems a GPU's
  `NV12`/`NV18` is its link count into the switch fabric, so every pair gets min(links_i, links_j) x rate.
- PIX/PXB: the PCIe x16 rate (NCCL model: Gen3 12, Gen4 24, Gen5 48).
- PHB/NODE: the PCIe rate divided by NCCL's 6/5 overhead for P2P through the CPU root complex.
- SYS: the inter-CPU link rate of the platform (NCCL model: BDW 6, SKL 10, SPR 22, AMD 16/24, ARM 6).
- A pair whose P2P status is not OK goes through host memory: capped at the PHB rate.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

# PCIe levels as nvidia-smi prints them, nearest first; the value is NVML's NVML_TOPOLOGY_* level.
PCIE_LEVELS: dict[str, int] = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
# NVML_TOPOLOGY_INTERNAL (0, two GPUs on one board) prints as PIX.
LEVEL_BY_NVML: dict[int, str] = {0: "PIX", **{v: k for k, v in PCIE_LEVELS.items()}}
_HOST_P2P_OVERHEAD = 1.2  # NCCL topo.h: Intel P2P overhead x6/5


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-node link rates in GB/s per direction, used to turn link labels into bandwidth estimates."""

    nvlink_gbps_per_link: float
    pcie_gbps: float
    sys_gbps: float


@dataclass(frozen=True, slots=True)
class MigDevice:
    """A GPU instance currently on a GPU: profile name and placement in memory-slice units."""

    profile: str
    start: int
    size: int


@dataclass(frozen=True, slots=True)
class GPU:
    """One GPU as discovered. `numa_node` is the NUMA node of the CPUs/memory near it (nvidia-smi's
    "NUMA Affinity"); `gpu_numa_id` is the NUMA node that is the GPU's own memory (Grace systems only)."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str
    memory_mib: int
    numa_node: int | None
    cpu_affinity: str
    nvswitch_links: int = 0
    mig_enabled: bool = False
    gpu_numa_id: int | None = None
    mig_devices: tuple[MigDevice, ...] = ()


def _upper_pairs(n: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


@dataclass(frozen=True)
class NodeTopology:
    """A node's GPUs and the link between every pair.

    Matrices are indexed by position in `gpus` (which is sorted by GPU index; positions equal indices
    unless a GPU was lost from the bus). `nvlinks[i][j]` counts direct GPU-to-GPU NVLinks only; links into
    an NVSwitch fabric are `GPU.nvswitch_links`. `pcie[i][j]` is the PCIe level under the pair.
    """

    name: str
    gpus: tuple[GPU, ...]
    nvlinks: tuple[tuple[int, ...], ...]
    pcie: tuple[tuple[str, ...], ...]
    rates: Rates
    no_p2p: frozenset[tuple[int, int]] = frozenset()
    bandwidth_gbps: tuple[tuple[float, ...], ...] = field(init=False, repr=False, compare=False)
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.gpus)
        if (
            len(self.nvlinks) != n
            or len(self.pcie) != n
            or any(len(r) != n for r in (*self.nvlinks, *self.pcie))
        ):
            raise ValueError(f"topology {self.name!r}: link matrices must be {n}x{n}")
        for i, j in _upper_pairs(n):
            if self.nvlinks[i][j] != self.nvlinks[j][i] or self.pcie[i][j] != self.pcie[j][i]:
                raise ValueError(f"topology {self.name!r}: links between GPU{i} and GPU{j} are not symmetric")
            if self.pcie[i][j] not in PCIE_LEVELS:
                raise ValueError(f"topology {self.name!r}: unknown PCIe level {self.pcie[i][j]!r}")
        bw = [[0.0] * n for _ in range(n)]
        for i, j in _upper_pairs(n):
            bw[i][j] = bw[j][i] = self._pair_bandwidth(i, j)
        object.__setattr__(self, "bandwidth_gbps", tuple(tuple(r) for r in bw))
        digest = hashlib.blake2b(repr(self._identity()).encode(), digest_size=12).hexdigest()
        object.__setattr__(self, "key", digest)

    def _identity(self) -> tuple[object, ...]:
        return (self.name, self.gpus, self.nvlinks, self.pcie, self.rates, tuple(sorted(self.no_p2p)))

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def size(self) -> int:
        return len(self.gpus)

    def pair_nvlinks(self, i: int, j: int) -> int:
        """NVLinks usable between positions i and j: direct links plus the shared switch fabric."""
        a, b = self.gpus[i].nvswitch_links, self.gpus[j].nvswitch_links
        return self.nvlinks[i][j] + (min(a, b) if a and b else 0)

    def via(self, i: int, j: int) -> str:
        """How a pair talks: "nvlink" (direct), "nvswitch" (fabric) or "pcie"."""
        if self.nvlinks[i][j]:
            return "nvlink"
        return "nvswitch" if self.pair_nvlinks(i, j) else "pcie"

    def _pair_bandwidth(self, i: int, j: int) -> float:
        links = self.pair_nvlinks(i, j)
        if links and self.rates.nvlink_gbps_per_link:
            return links * self.rates.nvlink_gbps_per_link
        level = self.pcie[i][j]
        host = self.rates.pcie_gbps / _HOST_P2P_OVERHEAD
        if level in ("PIX", "PXB"):
            bw = self.rates.pcie_gbps
        elif level in ("PHB", "NODE"):
            bw = host
        else:
            bw = min(self.rates.sys_gbps, host)
        if (i, j) in self.no_p2p or (j, i) in self.no_p2p:
            bw = min(bw, host)
        return round(bw, 3)

    def label(self, i: int, j: int) -> str:
        """The nvidia-smi `topo -m` cell for positions i, j."""
        if i == j:
            return "X"
        links = self.pair_nvlinks(i, j)
        return f"NV{links}" if links else self.pcie[i][j]

    def matrix(self) -> tuple[tuple[str, ...], ...]:
        """The whole `nvidia-smi topo -m` GPU x GPU matrix."""
        n = self.size
        return tuple(tuple(self.label(i, j) for j in range(n)) for i in range(n))

    def has_nvlink(self, i: int, j: int) -> bool:
        return self.pair_nvlinks(i, j) > 0

    def position(self, index: int) -> int:
        """Matrix position of GPU `index`."""
        for pos, gpu in enumerate(self.gpus):
            if gpu.index == index:
                return pos
        raise KeyError(f"no GPU{index} in topology {self.name!r}")
