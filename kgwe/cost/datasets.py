"""Readers for the public traces used to evaluate the cost engine (shared/data, see traces.md).

- Helios Earth VC vc6YE, per-minute running GPUs -> daily GPU-hours;
- Philly node sequence, per-minute active nodes -> daily active node-hours (partial last day dropped);
- Alibaba GenAI v2026 per-pod GPU duty cycle (%) and memory (bytes), joined by container_ip.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pandas as pd

from kgwe.resources import shared_data_dir


def _daily(frame: pd.DataFrame, column: str, *, drop_partial: bool) -> list[float]:
    per_minute = frame.set_index("time")[column]
    counts = per_minute.resample("D").count()
    daily = per_minute.resample("D").sum() / 60.0
    if drop_partial:
        daily = daily[counts >= 1440]
    return [float(v) for v in daily]


def helios_earth_daily_gpu_hours(root: Path | None = None) -> list[float]:
    path = (root or shared_data_dir()) / "helios-sc21" / "Earth_vc6YE_cluster_sequence_vc.csv"
    frame = pd.read_csv(path, usecols=["time", "running_gpu_num"], parse_dates=["time"])
    return _daily(frame, "running_gpu_num", drop_partial=True)


def philly_daily_node_hours(root: Path | None = None) -> list[float]:
    path = (root or shared_data_dir()) / "philly-atc19-derived" / "philly_node_sequence.csv"
    frame = pd.read_csv(path, usecols=["time", "active"], parse_dates=["time"])
    return _daily(frame, "active", drop_partial=True)


def _read_tar_csv(path: Path) -> pd.DataFrame:
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".csv"))
        return pd.read_csv(tar.extractfile(member))


PodSeries = tuple[list[float], list[float], list[float], list[float]]


def genai_pod_series(root: Path | None = None) -> dict[str, PodSeries]:
    """container_ip -> (compute times, compute GPU fraction, memory times, memory MiB), sorted by time."""
    base = (root or shared_data_dir()) / "alibaba-genai-v2026"
    duty = _read_tar_csv(base / "pod_gpu_duty_cycle_anon.tar.gz")
    mem = _read_tar_csv(base / "pod_gpu_memory_used_bytes_anon.tar.gz")
    out: dict[str, PodSeries] = {}
    duty = duty.sort_values("timestamp_anon")
    mem = mem.sort_values("timestamp_anon")
    mem_by = {k: g for k, g in mem.groupby("container_ip")}
    for ip, g in duty.groupby("container_ip"):
        m = mem_by.get(ip)
        if m is None:
            continue
        out[str(ip)] = (
            g["timestamp_anon"].astype(float).tolist(),
            (g["value"].astype(float) / 100.0).tolist(),
            m["timestamp_anon"].astype(float).tolist(),
            (m["value"].astype(float) / 2**20).tolist(),
        )
    return out
