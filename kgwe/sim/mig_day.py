"""bench/rebalance.py's day, in one place for every replay of it (the rebalancing benchmark and the
optimizer's evaluation): Alibaba openb's fractional-GPU pods as MIG instances of one H100-80GB profile each,
compressed onto a day; a pool of DGX H100 nodes sized by the offered peak; the sample repo's inference-h100
strategy. bench/rebalance.py's docstring says how and why."""

from __future__ import annotations

import math
from collections import Counter
from decimal import ROUND_DOWN, Decimal
from pathlib import Path
from typing import Any

from kgwe.gpu import catalog
from kgwe.planner.model import GPUState, PoolRequest
from kgwe.planner.plan import plan_pool
from kgwe.planner.rebalance import Settings
from kgwe.resources import sample_repo_dir
from kgwe.sim.mig_rebalance import Pod, day_from_trace, offered
from kgwe.sim.openb import fractional_pods, mig_profile

MODEL_KEY = "H100-80GB"
GPUS_PER_NODE = 8
DAY = 24 * 60
LOAD = 1.15  # offered peak / capacity at most this: stressed, not hopeless
DELAY = 3  # minutes a repartitioned node serves nothing
STRATEGY = "inference-h100"


def trace_day(minutes: int = DAY, data_dir: Path | None = None) -> tuple[list[Pod], float]:
    """The day's pods (and the time compression)."""
    model = catalog.model_by_key(MODEL_KEY)
    rows = [
        (p.creation, p.deletion, mig_profile(p.gpu_milli, model)) for p in fractional_pods(data_dir=data_dir)
    ]
    return day_from_trace(rows, minutes)


def pool_gpus(pods: list[Pod], minutes: int, nodes: int | None = None) -> tuple[GPUState, ...]:
    """The fewest nodes whose compute slices hold the offered peak at most LOAD times over (or `nodes`)."""
    model = catalog.model_by_key(MODEL_KEY)
    slices = {name: p.compute_slices for name, p in model.profiles.items()}
    peak = max(offered(pods, minutes, slices), default=0)
    count = nodes or max(1, math.ceil(peak / (GPUS_PER_NODE * model.compute_slots * LOAD)))
    return tuple(
        GPUState(f"dgx-h100-{n:02d}", i, model.key) for n in range(count) for i in range(GPUS_PER_NODE)
    )


def sample_strategy() -> Any:
    """The sample repo's inference-h100 partition strategy (shares, rebalanceInterval 5m, defaults)."""
    from kgwe.policy import load_repository
    from kgwe.policy.mig_strategy import MIGStrategy

    strategies = load_repository(sample_repo_dir()).objects(MIGStrategy)
    return next(o for o in strategies if o.metadata.name == STRATEGY).spec.partition_strategy


def settings_for(strategy: Any, gpus: int) -> Settings:
    return Settings(
        strategy.rebalance_interval, strategy.stabilization_window, strategy.max_gpus_per_rebalance(gpus)
    )


def day_shares(pods: list[Pod], minutes: int) -> dict[str, Decimal]:
    """Each profile's share of the compute-slice-minutes asked, in percent (rounded down to 0.1%, so they
    never add up to more than 100%)."""
    model = catalog.model_by_key(MODEL_KEY)
    slices: Counter[str] = Counter()
    for p in pods:
        slices[p.profile] += model.profiles[p.profile].compute_slices * min(p.runtime, minutes - p.arrival)
    total = sum(slices.values())
    out = {}
    for name, n in slices.most_common():
        pct = (Decimal(100 * n) / total).quantize(Decimal("0.1"), rounding=ROUND_DOWN)
        if pct > 0:
            out[name] = pct
    return out


def laid_out(gpus: tuple[GPUState, ...], shares: dict[str, Decimal]) -> PoolRequest:
    """The fresh pool laid out for `shares` (percent), as the strategy's plan leaves it."""
    fractions = {k: float(v) / 100 for k, v in shares.items()}
    layout = plan_pool(PoolRequest("openb-day", gpus, shares=fractions))
    return PoolRequest(
        "openb-day",
        tuple(GPUState(g.node, g.index, g.model, g.target) for g in layout.gpus),
        shares=fractions,
    )
