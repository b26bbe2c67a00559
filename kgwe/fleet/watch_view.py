"""One frame of `kgwe watch`: the GPU nodes table over the GPUWorkloads table, under a one-line header.
Pure, so a frame is the same text whether it comes from a watch or a test."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kgwe.fleet.nodes import NODE_COLUMNS, node_rows
from kgwe.fleet.output import table
from kgwe.fleet.workloads import WORKLOAD_COLUMNS, workload_rows

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: only written to a terminal


def frame(
    nodes: Sequence[Mapping[str, Any]],
    requests: Mapping[str, Mapping[str, int]],
    pods: Mapping[str, Sequence[str]],
    workloads: Sequence[Mapping[str, Any]],
    now: datetime,
    *,
    scope: str,
    wide: bool = False,
) -> str:
    """The text of one frame; `scope` says which namespaces the workloads come from."""
    n_rows = node_rows(nodes, requests, pods)
    w_rows = workload_rows(workloads, now)
    header = (
        f"kgwe watch  {now.strftime('%Y-%m-%d %H:%M:%S')} UTC  "
        f"{len(n_rows)} GPU node(s), {len(w_rows)} GPUWorkload(s) in {scope}"
    )
    node_text = table(n_rows, NODE_COLUMNS, wide=wide) if n_rows else "no GPU nodes\n"
    workload_text = table(w_rows, WORKLOAD_COLUMNS, wide=wide) if w_rows else f"no GPUWorkloads in {scope}\n"
    return f"{header}\n\n{node_text}\n{workload_text}"
