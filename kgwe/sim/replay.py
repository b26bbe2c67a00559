"""FGD-style fill-up replay: sample trace pods until 130% of GPU capacity has arrived, place each one with the
extender's own filter/score core, and report the GPU allocation ratio (allocated GPU milli / total GPU milli).

Method (docs/facts/traces.md §1, hkust-adsl/kubernetes-scheduler-simulator `tuneUpPods` with -tune 1.3 and
--shuffle-pod): pods drawn with replacement from the workload until their GPU request totals 1.3x the
cluster's GPUs, in random order, no departures; a pod no node can take is dropped (counted as arrived).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kgwe.extender.core import NodeTable, ShapeCache
from kgwe.extender.nodes import NodeState
from kgwe.extender.profile import Profile
from kgwe.sim.openb import TracePod, workload_mix


@dataclass(frozen=True)
class RunResult:
    seed: int
    alloc_ratio_100: float  # % of GPU milli allocated when arrived requests reach 100% of capacity
    alloc_ratio_130: float
    pods_arrived: int
    pods_failed: int


def sample_pods(pods: list[TracePod], capacity_milli: int, seed: int, tune: float = 1.3) -> list[TracePod]:
    """Draw with replacement until the GPU request reaches tune x capacity (FGD's tuneUpPods)."""
    rng = np.random.default_rng(seed)
    milli = np.array([p.gpu_milli_total for p in pods], dtype=np.int64)
    target = tune * capacity_milli
    out: list[int] = []
    total = 0
    while total < target:
        draw = rng.integers(0, len(pods), size=2048)
        for i in draw:
            out.append(int(i))
            total += int(milli[i])
            if total >= target:
                break
    return [pods[i] for i in out]


def replay(
    nodes: list[NodeState],
    pods: list[TracePod],
    profile: Profile,
    seed: int,
    mix_pods: list[TracePod] | None = None,
) -> RunResult:
    """One seed. `mix_pods` (default: the workload itself) defines the FGD target workload."""
    table = NodeTable(max_gpus=max(n.gpus for n in nodes), capacity=len(nodes))
    for n in nodes:
        table.upsert(NodeState(**{**n.__dict__, "gpu_used_milli": list(n.gpu_used_milli)}))
    if profile.fragmentation > 0:
        table.set_mix(workload_mix(mix_pods if mix_pods is not None else pods))
    cache = ShapeCache(table, max_shapes=4096)
    capacity = int(sum(n.gpus for n in nodes)) * 1000
    arrivals = sample_pods(pods, capacity, seed)
    rows = np.nonzero(table.live)[0]
    arrived = allocated = failed = 0
    at_100 = None
    for pod in arrivals:
        req = pod.req
        reason, score, best = cache.answer(rows, req, profile)
        ok = reason == 0
        if ok.any():
            i = int(np.argmax(np.where(ok, score, -1.0)))
            row = int(rows[i])
            table.allocate(row, req, table.choose_gpus(row, req, int(best[i])))
            allocated += req.gpu_milli_total
        else:
            failed += 1
        arrived += req.gpu_milli_total
        if at_100 is None and arrived >= capacity:
            at_100 = allocated
    return RunResult(
        seed, 100.0 * (at_100 or allocated) / capacity, 100.0 * allocated / capacity, len(arrivals), failed
    )
