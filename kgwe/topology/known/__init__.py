"""Real node topologies replayed from `nvidia-smi topo -m` matrices (docs/facts/topology.md §1).

Each `<NAME>.txt` here is the printed matrix plus `# key: value` facts (GPU model, memory, link rates,
PCI bus ids when the source gives them) and the PCIe level under NV# cells. Anything a source does not
give is synthesized deterministically and said so in the file's `notes`. Used by the fake NVML, the demo's
simulated nodes, tests and benchmarks.
"""

from __future__ import annotations

import uuid
from functools import cache
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.topology.model import GPU, NodeTopology, Rates
from kgwe.topology.parser import KnownFile, meta_number, parse_known_file

_DIR = Path(__file__).resolve().parent
_UUID_NAMESPACE = uuid.UUID("6b677765-746f-706f-6c6f-67792d6b6e77")


@cache
def _files() -> dict[str, Path]:
    return {p.stem: p for p in sorted(_DIR.glob("*.txt"))}


@cache
def _aliases() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, path in _files().items():
        meta = parse_known_file(path.read_text()).meta
        for alias in meta.get("aliases", "").split():
            out[alias.upper()] = name
    return out


def names() -> list[str]:
    """Canonical names of the known topologies (aliases such as DGX-H100 are accepted by `load`)."""
    return list(_files())


def aliases() -> dict[str, str]:
    """alias -> canonical name."""
    return dict(_aliases())


def canonical_name(name: str) -> str:
    """The canonical known-topology name for `name` (case-insensitive, aliases resolved)."""
    by_upper = {n.upper(): n for n in _files()}
    key = name.strip().upper()
    if key in by_upper:
        return by_upper[key]
    if key in _aliases():
        return _aliases()[key]
    raise KgweError(f"unknown topology {name!r}; known: {', '.join(names())}")


def load(name: str) -> NodeTopology:
    """The known topology `name` as a NodeTopology (KgweError if unknown); one shared object per name."""
    return _load(canonical_name(name))


@cache
def _load(canonical: str) -> NodeTopology:
    return from_known_file(parse_known_file(_files()[canonical].read_text()), default_name=canonical)


def source_text(name: str) -> str:
    """The checked-in file for `name`, e.g. to compare discovery against the source matrix."""
    return _files()[canonical_name(name)].read_text()


def synthesized_uuid(topology: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(_UUID_NAMESPACE, f"{topology}/{index}"))


def synthesized_bus_id(index: int) -> str:
    return f"00000000:{0x10 + 0x0C * index:02X}:00.0"


def from_known_file(kf: KnownFile, default_name: str = "custom") -> NodeTopology:
    """Build the model from a parsed known file; NV# cells become direct links, or fabric links when the
    file says the GPUs hang off NVSwitches (`nvswitch_links` > 0)."""
    meta = kf.meta
    name = meta.get("name", default_name)
    topo = kf.topo
    n = len(topo.indices)
    switch_links = int(meta_number(meta, "nvswitch_links", 0))
    nvlinks = [[0] * n for _ in range(n)]
    pcie: list[list[str]] = [["X"] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            cell = topo.cells[i][j]
            under = kf.pcie.cells[i][j] if kf.pcie is not None else cell
            if under.startswith("NV"):
                raise KgweError(f"{name}: GPU{i}/GPU{j} is {cell}; [pcie] must give the PCIe level")
            pcie[i][j] = under
            if cell.startswith("NV"):
                count = int(cell[2:])
                if switch_links:
                    if count != switch_links:
                        raise KgweError(f"{name}: NVSwitch system shows {cell}, expected NV{switch_links}")
                else:
                    nvlinks[i][j] = count
            elif kf.pcie is not None and cell != under:
                raise KgweError(f"{name}: GPU{i}/GPU{j} is {cell} but the [pcie] section says {under}")
    bus_ids = meta.get("pci_bus_ids", "").split()
    memory_mib = int(meta_number(meta, "memory_mib", 0))
    gpus = tuple(
        GPU(
            index=idx,
            uuid=synthesized_uuid(name, idx),
            pci_bus_id=bus_ids[pos] if pos < len(bus_ids) else synthesized_bus_id(idx),
            name=meta.get("gpu_name", "NVIDIA GPU"),
            memory_mib=memory_mib,
            numa_node=topo.numa_affinity[pos] if topo.numa_affinity else None,
            cpu_affinity=topo.cpu_affinity[pos] if topo.cpu_affinity else "",
            nvswitch_links=switch_links,
            gpu_numa_id=topo.gpu_numa_id[pos] if topo.gpu_numa_id else None,
        )
        for pos, idx in enumerate(topo.indices)
    )
    rates = Rates(
        nvlink_gbps_per_link=meta_number(meta, "nvlink_gbps_per_link", 25.0),
        pcie_gbps=meta_number(meta, "pcie_gbps", 24.0),
        sys_gbps=meta_number(meta, "sys_gbps", 16.0),
    )
    return NodeTopology(
        name=name,
        gpus=gpus,
        nvlinks=tuple(tuple(r) for r in nvlinks),
        pcie=tuple(tuple(r) for r in pcie),
        rates=rates,
    )


def facts(name: str) -> dict[str, str]:
    """The `# key: value` facts of known topology `name` (GPU model, rates, NVSwitch count, sources)."""
    return dict(parse_known_file(source_text(name)).meta)


def identify(topo: NodeTopology) -> str | None:
    """The known topology a discovered one matches (same GPU model, matrix and NUMA layout), if any."""
    shape = (topo.matrix(), tuple(g.name for g in topo.gpus), tuple(g.numa_node for g in topo.gpus))
    for name in names():
        ref = load(name)
        if (ref.matrix(), tuple(g.name for g in ref.gpus), tuple(g.numa_node for g in ref.gpus)) == shape:
            return name
    return None
