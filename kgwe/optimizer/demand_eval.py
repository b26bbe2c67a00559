"""Decision 1 on bench/rebalance.py's day: the rebalancing rule with the demand outlook against the reactive
rule it replaces, from the same start (bench/optimizer.py, `kgwe optimize report --traces`).

The day, the pool (DGX H100 nodes sized by the offered peak), the start (the sample repo's inference-h100
shares: a pool laid out for other work than the trace's) and the rule's settings are bench/rebalance.py's
(kgwe.sim.mig_day). The outlook is fitted at each evaluation on the demand measured in the minutes already
replayed, and on nothing else: no day disjoint from the replayed one exists in openb (its 25 pod lists are
one timeline; the gpushare lists are other pods of the same weeks), so every forecast is out of sample by
time, and the first minutes run without one (docs/optimizer.md).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path

from kgwe.optimizer.demand import forecaster
from kgwe.optimizer.registry import Evaluation
from kgwe.planner.model import GPUState, PoolRequest
from kgwe.planner.plan import plan_pool
from kgwe.sim.mig_day import (
    DAY,
    DELAY,
    day_shares,
    laid_out,
    pool_gpus,
    sample_strategy,
    settings_for,
    trace_day,
)
from kgwe.sim.mig_rebalance import Pod, Rebalancing, Result, offered, simulate

AIM_GPUS_PER_HOUR = 3  # the aim: at most this many GPUs repartitioned per hour
ORACLE_HEADROOM = 1.5  # the oracle's layout holds this many times each profile's mean instances of the day


def oracle_static(pods: list[Pod], pool: PoolRequest, minutes: int) -> tuple[float, int]:
    """The bound of the aim from this start: the day's own mix and mean demand known in advance, the pool
    repartitioned once at minute 0 within the aim's whole budget of GPUs, then left alone. (served, GPUs)"""
    mix = {k: float(v) / 100 for k, v in day_shares(pods, minutes).items()}
    demand = {
        p: math.ceil(
            ORACLE_HEADROOM * statistics.mean(offered([x for x in pods if x.profile == p], minutes, {p: 1}))
        )
        for p in mix
    }
    budget = AIM_GPUS_PER_HOUR * minutes // 60
    limits = replace(pool.limits, max_gpus_changed=budget)
    plan = plan_pool(replace(pool, shares=mix, demand=demand, fewest_changes=True, limits=limits))
    ready = replace(pool, gpus=tuple(GPUState(g.node, g.index, g.model, g.target) for g in plan.gpus))
    return simulate(pods, ready, minutes).served_fraction, plan.gpus_changed


def _line(name: str, r: Result, hours: float) -> str:
    return (
        f"  {name}: served {r.served_fraction:.4f} of {r.demanded:,} instance-minutes, "
        f"{r.gpus_repartitioned} GPUs repartitioned ({r.gpus_repartitioned / hours:.2f} per hour) by "
        f"{len(r.repartitions)} decisions; pending-pod-minutes {r.pending_pod_minutes:,}"
    )


def evaluate(data_dir: Path, quick: bool = False) -> Evaluation:
    minutes = 6 * 60 if quick else DAY
    day, factor = trace_day(DAY, data_dir / "alibaba-gpu-v2023")
    pods = [p for p in day if p.arrival < minutes]
    gpus = pool_gpus(pods, minutes)
    strategy = sample_strategy()
    settings = settings_for(strategy, len(gpus))
    pool = laid_out(gpus, strategy.shares)
    reactive = simulate(pods, pool, minutes, Rebalancing(settings, DELAY))
    ahead = simulate(pods, pool, minutes, Rebalancing(settings, DELAY, forecaster()))
    hours = minutes / 60
    bound, bound_gpus = oracle_static(pods, pool, minutes)
    lines = [
        f"openb's day (bench/rebalance.py): {len(pods):,} MIG pods over {hours:g} h (arrivals compressed "
        f"{factor:.1f}x), {len(gpus)} H100s starting from the sample repo's inference-h100 shares",
        _line("reactive rule (today)", reactive, hours),
        _line("with the demand outlook", ahead, hours),
    ]
    lines += [f"    {r.minute // 60:02d}:{r.minute % 60:02d} {r.message}" for r in ahead.repartitions[:4]]
    lines.append(
        f"  bound (knowing the day's mix in advance, {bound_gpus} GPUs repartitioned once at the start, "
        f"{bound_gpus / hours:.2f} per hour): served {bound:.4f}"
    )
    figures: dict[str, float | int] = {
        "rebalance_served_fraction": round(ahead.served_fraction, 4),
        "rebalance_gpus_per_hour": round(ahead.gpus_repartitioned / hours, 2),
        "rebalance_served_fraction_reactive": round(reactive.served_fraction, 4),
        "rebalance_gpus_per_hour_reactive": round(reactive.gpus_repartitioned / hours, 2),
        "rebalance_served_fraction_oracle_at_aim": round(bound, 4),
    }
    return Evaluation("mig-demand", figures, tuple(lines))
