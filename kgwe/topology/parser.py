"""Read `nvidia-smi topo -m` output (as printed by real drivers, old and new) into plain data.

Accepts tab- or space-separated output, NIC rows/columns (ignored), the legend, the old `SOC` spelling of
SYS, and the optional "NUMA Affinity" / "GPU NUMA ID" columns. A KGWE known-topology file is the same text
with `# key: value` metadata lines before it and an optional `[pcie]` section after it that gives the PCIe
level hidden under NV# cells.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kgwe.errors import KgweError

_GPU = re.compile(r"^GPU(\d+)$")
_NV = re.compile(r"^NV(\d+)$")
_CELL_ALIASES = {"SOC": "SYS"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # nvidia-smi underlines the header on a terminal
_VALID_LEVELS = {"PIX", "PXB", "PHB", "NODE", "SYS"}


@dataclass(frozen=True)
class TopoMatrix:
    """The GPU x GPU part of one matrix: cells as printed ("X", "NV2", "PIX", ...), plus per-GPU columns."""

    indices: tuple[int, ...]
    cells: tuple[tuple[str, ...], ...]
    cpu_affinity: tuple[str, ...] = ()
    numa_affinity: tuple[int | None, ...] = ()
    gpu_numa_id: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class KnownFile:
    meta: dict[str, str]
    topo: TopoMatrix
    pcie: TopoMatrix | None = None
    extra: dict[str, str] = field(default_factory=dict)


def _header_columns(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"\t|\s{2,}", line.strip()) if c.strip()]


def _is_header(tokens: list[str]) -> bool:
    """The header starts with GPU0 followed by another column name; the GPU0 row has X second."""
    return bool(tokens) and tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1].upper() != "X")


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    if not text or text.upper() == "N/A":
        return None
    try:
        return int(text.split(",")[0].split("-")[0])
    except ValueError:
        return None


def normalize_cell(cell: str) -> str:
    cell = cell.strip().upper()
    cell = _CELL_ALIASES.get(cell, cell)
    if cell == "X" or cell in _VALID_LEVELS or _NV.match(cell):
        return cell
    raise KgweError(f"unknown topology matrix cell {cell!r}")


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse the first GPU x GPU matrix in `text` (nvidia-smi topo -m output)."""
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    header_at = next((k for k, ln in enumerate(lines) if _is_header(ln.split())), None)
    if header_at is None:
        raise KgweError("no `nvidia-smi topo -m` matrix found (expected a header line with GPU0)")
    columns = _header_columns(lines[header_at])
    matrix_cols = [c for c in columns if _GPU.match(c) or re.match(r"^(NIC\d+|mlx\S+)$", c)]
    extra_cols = columns[len(matrix_cols) :]
    gpu_cols = [k for k, c in enumerate(matrix_cols) if _GPU.match(c)]
    indices: list[int] = []
    rows: list[list[str]] = []
    extras: list[dict[str, str]] = []
    for ln in lines[header_at + 1 :]:
        tokens = ln.split()
        gpu = _GPU.match(tokens[0]) if tokens else None
        if gpu is None:
            if indices:
                break
            continue
        values = tokens[1:]
        if len(values) < len(matrix_cols):
            raise KgweError(f"topology row {tokens[0]} has {len(values)} cells, expected {len(matrix_cols)}")
        indices.append(int(gpu.group(1)))
        rows.append([normalize_cell(values[k]) for k in gpu_cols])
        extras.append(dict(zip(extra_cols, values[len(matrix_cols) :], strict=False)))
    if not rows:
        raise KgweError("topology matrix has no GPU rows")
    n = len(rows)
    if len(gpu_cols) != n:
        raise KgweError(f"topology matrix has {len(gpu_cols)} GPU columns but {n} GPU rows")
    for i in range(n):
        if rows[i][i] != "X":
            raise KgweError(f"topology matrix cell GPU{indices[i]}/GPU{indices[i]} must be X")
        for j in range(n):
            if rows[i][j] != rows[j][i]:
                raise KgweError(f"topology matrix is not symmetric at GPU{indices[i]}/GPU{indices[j]}")
    return TopoMatrix(
        indices=tuple(indices),
        cells=tuple(tuple(r) for r in rows),
        cpu_affinity=tuple(e.get("CPU Affinity", "") for e in extras),
        numa_affinity=tuple(_int_or_none(e.get("NUMA Affinity", "")) for e in extras),
        gpu_numa_id=tuple(_int_or_none(e.get("GPU NUMA ID", "")) for e in extras),
    )


def parse_known_file(text: str) -> KnownFile:
    """Split a known-topology file into metadata, the topo -m matrix and the optional [pcie] matrix."""
    meta: dict[str, str] = {}
    for ln in text.splitlines():
        m = re.match(r"^#\s*([a-z_]+):\s*(.*)$", ln)
        if m:
            meta[m.group(1)] = m.group(2).strip()
    main, _, pcie_part = text.partition("\n[pcie]\n")
    topo = parse_topo_matrix(main)
    pcie = parse_topo_matrix(pcie_part) if pcie_part else None
    if pcie is not None and pcie.indices != topo.indices:
        raise KgweError("the [pcie] matrix must list the same GPUs as the topo -m matrix")
    return KnownFile(meta=meta, topo=topo, pcie=pcie)


def meta_number(meta: dict[str, str], key: str, default: float | None = None) -> float:
    """A numeric metadata value; text after the number is a comment."""
    raw = meta.get(key)
    if raw is None:
        if default is None:
            raise KgweError(f"known topology is missing `{key}`")
        return default
    return float(raw.split()[0])
