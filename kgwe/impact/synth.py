"""Deterministic synthetic demand (for sample-repo and the benchmark): Poisson arrivals per team, exponential
runtimes, request shapes drawn from each team's mix, offered load `load` of the team's GPUs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from kgwe.impact.record import DemandPod, DemandRecord, Shape


@dataclass(frozen=True)
class TeamDemand:
    namespace: str
    team: str
    gpus: int  # GPUs (or GPU equivalents of MIG slices) this team's demand is sized against
    shapes: Sequence[tuple[Shape, float]]  # shape, weight
    mean_hours: float
    load: float = 0.8


def synthesize(
    teams: Sequence[TeamDemand],
    *,
    gpus_by_product: Mapping[str, int],
    nodes: int,
    until: datetime,
    days: int = 7,
    seed: int = 7,
    cluster: str = "synthetic",
) -> DemandRecord:
    rng = np.random.default_rng(seed)
    window = days * 86400
    shapes: list[Shape] = []
    pods: list[DemandPod] = []
    for t_index, team in enumerate(teams):
        weights = np.array([w for _, w in team.shapes], dtype=float)
        weights /= weights.sum()
        first = len(shapes)
        shapes += [s for s, _ in team.shapes]
        gpu_size = np.array([_gpus(s) for s, _ in team.shapes])
        mean_gpus = float((weights * gpu_size).sum())
        rate = team.load * team.gpus / (mean_gpus * team.mean_hours * 3600)  # pods per second
        t = -team.mean_hours * 3600.0  # start earlier so the window opens with a running cluster
        while True:
            t += rng.exponential(1 / rate)
            if t >= window:
                break
            duration = rng.exponential(team.mean_hours * 3600)
            end = t + duration
            if end <= 0:
                continue
            arrival = max(0, int(t))
            stop = None if end >= window else max(arrival, int(end))
            shape = first + int(rng.choice(len(team.shapes), p=weights))
            pods.append(DemandPod(arrival, stop, shape, t_index))
    pods.sort(key=lambda p: (p.arrival_s, p.team, p.shape))
    return DemandRecord(
        cluster=cluster,
        generated_at=until,
        since=until - timedelta(days=days),
        until=until,
        gpus_by_product=dict(sorted(gpus_by_product.items())),
        nodes=nodes,
        teams=tuple((t.namespace, t.team) for t in teams),
        shapes=tuple(shapes),
        pods=tuple(pods),
        pods_seen=len(pods),
        notes=(f"synthetic demand (kgwe.impact.synth, seed {seed}), not metered",),
    )


def _gpus(shape: Shape) -> float:
    if shape.kind == "shared":
        return shape.count * (shape.gpu_milli or 0) / 1000
    if shape.kind == "mig":  # "<compute slices>g.<memory>": slices of seven
        return shape.count * int((shape.mig_profile or "1g").split("g", 1)[0]) / 7
    return float(shape.count)
