"""The node annotation `kgwe.nvidia.io/topology`: a versioned, compact JSON form of a NodeTopology.

Written by the agent, read by the extender, simulator and controller. Compact because it lives on the
Node object that every watcher receives: per-pair data is one string over the upper triangle, so 16 GPUs
with UUIDs stay near 2 KiB (limit 16 KiB).

Version 1 layout:
  {"v": 1, "name": str, "r": [nvlink_gbps_per_link, pcie_gbps, sys_gbps],
   "g": [[index, uuid, pci_bus_id, name, memory_mib, numa|null, cpus, nvswitch_links, mig 0/1,
          gpu_numa|null, [[profile, start, size], ...]], ...],
   "nv": "0,0,2,...",   # direct NVLinks per pair, upper triangle row by row
   "pcie": "1123...",   # PCIe level per pair: 1 PIX, 2 PXB, 3 PHB, 4 NODE, 5 SYS (NVML level / 10)
   "np": [[i, j], ...]} # pairs (matrix positions) whose P2P status is not OK; omitted when empty
"""

from __future__ import annotations

from typing import Any

import orjson

from kgwe.errors import KgweError
from kgwe.topology.model import GPU, PCIE_LEVELS, MigDevice, NodeTopology, Rates
from kgwe.vocab import TOPOLOGY_ANNOTATION

ANNOTATION_KEY = TOPOLOGY_ANNOTATION
VERSION = 1
MAX_BYTES = 16 * 1024

_LEVEL_CODE = {level: str(value // 10) for level, value in PCIE_LEVELS.items()}
_CODE_LEVEL = {code: level for level, code in _LEVEL_CODE.items()}


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def encode(topo: NodeTopology) -> str:
    """The annotation value for `topo` (deterministic: equal topologies give equal strings)."""
    n = topo.size
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    doc: dict[str, Any] = {
        "v": VERSION,
        "name": topo.name,
        "r": [_num(topo.rates.nvlink_gbps_per_link), _num(topo.rates.pcie_gbps), _num(topo.rates.sys_gbps)],
        "g": [
            [
                g.index,
                g.uuid,
                g.pci_bus_id,
                g.name,
                g.memory_mib,
                g.numa_node,
                g.cpu_affinity,
                g.nvswitch_links,
                int(g.mig_enabled),
                g.gpu_numa_id,
                [[m.profile, m.start, m.size] for m in g.mig_devices],
            ]
            for g in topo.gpus
        ],
        "nv": ",".join(str(topo.nvlinks[i][j]) for i, j in pairs),
        "pcie": "".join(_LEVEL_CODE[topo.pcie[i][j]] for i, j in pairs),
    }
    if topo.no_p2p:
        doc["np"] = sorted([min(p), max(p)] for p in topo.no_p2p)
    text = orjson.dumps(doc).decode()
    if len(text.encode()) > MAX_BYTES:
        raise KgweError(f"topology annotation for {topo.name!r} is {len(text)} bytes, over {MAX_BYTES}")
    return text


def topology_name(text: str | None) -> str | None:
    """Only the topology's `name` (e.g. HGX-H100), without decoding the rest; None when absent, oversized
    or malformed. For views that show the class of a node's interconnect."""
    if not text or len(text) > MAX_BYTES:
        return None
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    name = doc.get("name") if isinstance(doc, dict) else None
    return name if isinstance(name, str) else None


def decode(text: str) -> NodeTopology:
    """Parse an annotation value; KgweError on anything malformed or of an unknown version."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise KgweError(f"{ANNOTATION_KEY} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise KgweError(f"{ANNOTATION_KEY} must be a JSON object")
    if doc.get("v") != VERSION:
        raise KgweError(
            f"{ANNOTATION_KEY} has unsupported version {doc.get('v')!r} (this KGWE reads {VERSION})"
        )
    try:
        gpus = tuple(
            GPU(
                index=int(g[0]),
                uuid=str(g[1]),
                pci_bus_id=str(g[2]),
                name=str(g[3]),
                memory_mib=int(g[4]),
                numa_node=None if g[5] is None else int(g[5]),
                cpu_affinity=str(g[6]),
                nvswitch_links=int(g[7]),
                mig_enabled=bool(g[8]),
                gpu_numa_id=None if g[9] is None else int(g[9]),
                mig_devices=tuple(MigDevice(str(m[0]), int(m[1]), int(m[2])) for m in g[10]),
            )
            for g in doc["g"]
        )
        n = len(gpus)
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        nv_values = [int(x) for x in doc["nv"].split(",")] if pairs else []
        pcie_codes = doc["pcie"]
        if len(nv_values) != len(pairs) or len(pcie_codes) != len(pairs):
            raise ValueError(f"expected {len(pairs)} pair entries for {n} GPUs")
        nvlinks = [[0] * n for _ in range(n)]
        pcie = [["X"] * n for _ in range(n)]
        for (i, j), links, code in zip(pairs, nv_values, pcie_codes, strict=True):
            nvlinks[i][j] = nvlinks[j][i] = links
            pcie[i][j] = pcie[j][i] = _CODE_LEVEL[code]
        rates = Rates(*(float(x) for x in doc["r"]))
        return NodeTopology(
            name=str(doc["name"]),
            gpus=gpus,
            nvlinks=tuple(map(tuple, nvlinks)),
            pcie=tuple(map(tuple, pcie)),
            rates=rates,
            no_p2p=frozenset((int(p[0]), int(p[1])) for p in doc.get("np", ())),
        )
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise KgweError(f"{ANNOTATION_KEY} is malformed: {type(exc).__name__}: {exc}") from None
