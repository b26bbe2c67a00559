"""MIG planner benchmark: scale, quality on real demand, and disruption.

Scale: 10,000 and 100,000 H100-80GB GPUs (1,250 and 12,500 nodes x 8) with a random current state (each GPU
one of the 19 maximal layouts, ~10% of instances in use), strategy 1g.10gb 70% / 2g.20gb 20% / 3g.40gb 10%;
wall time of plan_pool (and CPU time at 100,000, which load on the machine distorts less).

Quality: the Alibaba openb trace (default pod list), pods with num_gpu == 1 and gpu_milli < 1000. Each pod
maps to the smallest H100-80GB profile covering both gpu_milli/1000 of the 7 compute slices and of the 8
memory slices (the trace has no GPU-memory field, so memory share = compute share). Instants are the
creation-time quantiles (k + 0.5) / K of those pods (evenly spaced clock instants would land mostly in the
first 115 days, when 1-3 such pods exist); demand = pods alive then (creation <= t < deletion, pending ones
included). The pool has the fewest GPUs whose aggregate compute and memory slices could hold that demand.
Served = instances a pod of that profile can use (exact profile match, as with the device plugin's mixed
strategy), summed over instants:
  KGWE        plan_pool(demand=...) on a fresh pool,
  upper bound the LP relaxation (scipy linprog/HiGHS) over per-GPU maximal profile multisets: maximise served
              with x_L >= 0 GPUs on multiset L, sum x_L = N, served_p <= min(demand_p, sum_L x_L count_L(p)),
  all-1g      every GPU 7 x 1g.10gb,   all-balanced  every GPU 2 x 1g.10gb + 2g.20gb + 3g.40gb.
Disruption: demand per profile shifted by a seeded uniform +-10%; GPUs changed by the incremental re-plan
(current = previous plan) vs planning from scratch and applying that plan as it is (GPU i gets the scratch
plan's layout i). Also printed: scratch credited with the best possible matching of its layouts to the
existing GPUs (a lower bound no real from-scratch rollout reaches without an incremental step). At the
instants above only ~10-20 pods are alive, so a 10% shift rarely moves a count; the JSON therefore reports
the shift on the trace's static fill (all fractional pods at once, the FGD experiment's setting, ~2,000
GPUs); per-instant sums are printed.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from collections import Counter

import numpy as np
from scipy.optimize import linprog

from kgwe.gpu import catalog
from kgwe.gpu.layouts import enumerate_layouts, feasible_multisets
from kgwe.planner.model import GPUState, PoolRequest
from kgwe.planner.plan import plan_pool
from kgwe.sim.openb import fractional_pods, mig_profile

MODEL = catalog.model_by_key("H100-80GB")
SEED_SHARES = {"1g.10gb": 0.7, "2g.20gb": 0.2, "3g.40gb": 0.1}
BALANCED = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def load_pods() -> list[tuple[int, int, str]]:
    return [(p.creation, p.deletion, mig_profile(p.gpu_milli, MODEL)) for p in fractional_pods()]


def pool_size(demand: Counter) -> int:
    compute = sum(MODEL.profiles[p].compute_slices * n for p, n in demand.items())
    memory = sum(MODEL.profiles[p].memory_slices * n for p, n in demand.items())
    return max(1, math.ceil(max(compute / MODEL.compute_slots, memory / MODEL.memory_slots)))


def lp_upper_bound(demand: Counter, n_gpus: int) -> float:
    names = sorted(demand)
    every = [p.name for p in MODEL.base_profiles]
    layouts = [dict(ms) for ms in feasible_multisets(MODEL, every, maximal=True)]
    n_l, n_p = len(layouts), len(names)
    # variables: x_L (n_l), served_p (n_p); maximise sum served
    c = np.concatenate([np.zeros(n_l), -np.ones(n_p)])
    a_ub = np.zeros((n_p, n_l + n_p))
    for k, name in enumerate(names):
        a_ub[k, :n_l] = [-lay.get(name, 0) for lay in layouts]
        a_ub[k, n_l + k] = 1.0
    a_eq = np.concatenate([np.ones(n_l), np.zeros(n_p)]).reshape(1, -1)
    bounds = [(0, None)] * n_l + [(0, demand[name]) for name in names]
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(n_p), A_eq=a_eq, b_eq=[n_gpus], bounds=bounds, method="highs")
    return -res.fun


def served(demand: Counter, achieved: Counter) -> int:
    return sum(min(n, achieved[p]) for p, n in demand.items())


def fresh_pool(n_gpus: int) -> tuple[GPUState, ...]:
    return tuple(GPUState(f"node-{i // 8:04d}", i % 8, MODEL.key) for i in range(n_gpus))


def multisets_of(plan) -> Counter:
    return Counter(tuple(sorted(Counter(g.target_profiles or []).items())) for g in plan.gpus)


def quality(pods, instants: int, seed: int) -> dict:
    created = sorted(p[0] for p in pods)
    rng = random.Random(seed)
    totals = Counter()
    changed_inc = changed_scratch = 0
    for k in range(instants):
        t = created[int(len(created) * (k + 0.5) / instants)]
        demand = Counter(p for c, d, p in pods if c <= t < d)
        if not demand:
            continue
        n = pool_size(demand)
        plan = plan_pool(PoolRequest("openb", fresh_pool(n), demand=dict(demand)))
        totals["demanded"] += sum(demand.values())
        totals["kgwe"] += served(demand, Counter(plan.achieved_counts))
        totals["upper"] += lp_upper_bound(demand, n)
        totals["all_1g"] += min(demand["1g.10gb"], 7 * n)
        totals["balanced"] += sum(min(demand[p], c * n) for p, c in BALANCED.items())
        _, inc, scratch, _ = changes_after_shift(demand, rng)
        changed_inc += inc
        changed_scratch += scratch
        print(
            f"t={t / 86400:6.1f}d demand={sum(demand.values()):4d} gpus={n:4d} "
            f"kgwe={served(demand, Counter(plan.achieved_counts)):4d} ub={lp_upper_bound(demand, n):7.1f} "
            f"changed inc/scratch={inc}/{scratch}"
        )
    d = totals["demanded"]
    return {
        "served_fraction": totals["kgwe"] / d,
        "upper_bound_fraction": totals["upper"] / d,
        "all_1g_fraction": totals["all_1g"] / d,
        "all_balanced_fraction": totals["balanced"] / d,
        "gpus_changed_incremental": changed_inc,
        "gpus_changed_scratch": changed_scratch,
    }


def changes_after_shift(demand: Counter, rng: random.Random) -> tuple[int, int, int, int]:
    """(pool GPUs, changed incrementally, changed from scratch, scratch's best-matching lower bound)."""
    n = pool_size(demand)
    plan = plan_pool(PoolRequest("openb", fresh_pool(n), demand=dict(demand)))
    shifted = Counter({p: max(0, round(v * (1 + rng.uniform(-0.1, 0.1)))) for p, v in demand.items()})
    current = tuple(GPUState(g.node, g.index, g.model, g.target) for g in plan.gpus)
    inc = plan_pool(PoolRequest("openb", current, demand=dict(shifted)))
    scratch = plan_pool(PoolRequest("openb", fresh_pool(n), demand=dict(shifted)))
    same = multisets_of(plan) & multisets_of(scratch)
    positional = sum(
        1
        for a, b in zip(plan.gpus, scratch.gpus, strict=True)
        if Counter(a.target_profiles or []) != Counter(b.target_profiles or [])
    )
    return n, inc.gpus_changed, positional, n - sum(same.values())


def fill_disruption(pods, seed: int) -> dict:
    demand = Counter(p for _, _, p in pods)
    n, inc, scratch, matched = changes_after_shift(demand, random.Random(seed))
    print(
        f"static fill: {sum(demand.values())} pods on {n} GPUs; +-10% shift changes {inc} GPUs "
        f"incrementally, {scratch} from scratch (best-matching lower bound {matched})"
    )
    return {"gpus_changed_incremental": inc, "gpus_changed_scratch": scratch}


def scale(n_gpus: int, repeats: int, seed: int) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds) of planning `n_gpus` H100s from a random state."""
    rng = random.Random(seed)
    layouts = enumerate_layouts(MODEL)
    gpus = []
    for i in range(n_gpus):
        layout = rng.choice(layouts)
        in_use = tuple(inst for inst in layout if rng.random() < 0.1)
        gpus.append(GPUState(f"node-{i // 8:05d}", i % 8, MODEL.key, layout, in_use))
    req = PoolRequest("scale", tuple(gpus), shares=SEED_SHARES)
    fresh = PoolRequest("scale-fresh", fresh_pool(n_gpus), shares=SEED_SHARES)
    times, cpu_times, fresh_times = [], [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        plan = plan_pool(req)
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
        t0 = time.perf_counter()
        plan_pool(fresh)
        fresh_times.append(time.perf_counter() - t0)
    print(
        f"scale: {n_gpus:,} GPUs random state: median {statistics.median(times):.3f}s wall, "
        f"{statistics.median(cpu_times):.3f}s CPU (runs {[round(t, 3) for t in times]}); "
        f"fresh pool: median {statistics.median(fresh_times):.3f}s; changed {plan.gpus_changed} GPUs, "
        f"shares {{{', '.join(f'{k}: {v:.3f}' for k, v in plan.achieved_shares.items())}}}"
    )
    return statistics.median(times), statistics.median(cpu_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer instants and repeats")
    parser.add_argument("--instants", type=int, default=None)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    instants = args.instants or (8 if args.quick else 40)
    repeats = 1 if args.quick else 3
    seconds, _ = scale(10_000, repeats, args.seed)
    seconds_100k, cpu_100k = scale(100_000, repeats, args.seed)
    pods = load_pods()
    mix = dict(Counter(p for _, _, p in pods).most_common())
    print(f"openb: {len(pods)} fractional pods; profiles {mix}")
    result = {
        "plan_seconds_10k_gpus": round(seconds, 3),
        "plan_seconds_100k_gpus": round(seconds_100k, 3),
        "plan_cpu_seconds_100k_gpus": round(cpu_100k, 3),
        **quality(pods, instants, args.seed),
    }
    print(
        f"per-instant disruption: incremental {result['gpus_changed_incremental']}, "
        f"scratch {result['gpus_changed_scratch']}"
    )
    result.update(fill_disruption(pods, args.seed))
    for key in ("served_fraction", "upper_bound_fraction", "all_1g_fraction", "all_balanced_fraction"):
        result[key] = round(result[key], 4)
    print(f"KGWE / upper bound = {result['served_fraction'] / result['upper_bound_fraction']:.4f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
