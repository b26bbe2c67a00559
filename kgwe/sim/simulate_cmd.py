"""Replay the Alibaba openb GPU trace through the extender's scoring core (FGD fill-up method) and print the
GPU allocation ratio at 100% and 130% arrived load beside the six published policies.

Examples:
  kgwe simulate                                   # all 17 workloads, 10 seeds, table
  kgwe simulate --workload default --seeds 10 --json
  kgwe simulate --workload default --fragmentation 0   # the same profile without the FGD term
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from kgwe.errors import KgweError
from kgwe.extender.profile import DEFAULT_PROFILE, Profile
from kgwe.sim.openb import (
    POLICIES,
    WORKLOADS,
    load_nodes,
    load_pods,
    published,
)
from kgwe.sim.replay import replay
from kgwe.vocab import STRATEGIES

FIRST_SEED = 42  # the FGD scripts use tune seeds 42..51


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workload", action="append", choices=WORKLOADS, help="workload (repeatable; default all 17)"
    )
    parser.add_argument("--seeds", type=int, default=10, help="seeds per workload (42, 43, ...; default 10)")
    parser.add_argument("--json", action="store_true", help="print JSON (one object per workload)")
    parser.add_argument("--strategy", choices=STRATEGIES, default=DEFAULT_PROFILE.strategy)
    parser.add_argument(
        "--weights",
        default=None,
        metavar="T/R/B",
        help="topology/resource/balance weights (default 40/35/25)",
    )
    parser.add_argument(
        "--fragmentation",
        type=float,
        default=DEFAULT_PROFILE.fragmentation,
        help="weight of the FGD fragmentation term (0 = off)",
    )
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    parser.add_argument(
        "--data", type=Path, help="openb CSV directory (default: $KGWE_DATA/alibaba-gpu-v2023)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        help="FGD expected-results directory (default: $KGWE_DATA/fgd-atc23-expected-results)",
    )


def _profile(args: argparse.Namespace) -> Profile:
    t, r, b = DEFAULT_PROFILE.topology, DEFAULT_PROFILE.resource, DEFAULT_PROFILE.balance
    if args.weights:
        try:
            t, r, b = (float(x) for x in args.weights.split("/"))
        except ValueError:
            raise KgweError(f"--weights: expected T/R/B like 40/35/25, not {args.weights!r}") from None
    if min(t, r, b, args.fragmentation) < 0:
        raise KgweError("weights must not be negative")
    return Profile(
        name="simulate",
        topology=t,
        resource=r,
        balance=b,
        strategy=args.strategy,
        fragmentation=args.fragmentation,
    )


def _run_one(job: tuple[str, int, Profile, Path]) -> tuple[str, int, float, float, int, int]:
    workload, seed, profile, data = job
    r = replay(load_nodes(data), load_pods(workload, data), profile, seed)
    return workload, seed, r.alloc_ratio_100, r.alloc_ratio_130, r.pods_arrived, r.pods_failed


def run(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise KgweError("--seeds must be at least 1")
    profile = _profile(args)
    workloads = args.workload or list(WORKLOADS)
    pub = published(args.results)
    jobs = [(w, FIRST_SEED + s, profile, args.data) for w in workloads for s in range(args.seeds)]
    load_nodes(args.data)  # fail fast with a clear message if the data is missing
    for w in workloads:
        load_pods(w, args.data)
    if args.jobs > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(_run_one, jobs, chunksize=1))
    else:
        results = [_run_one(j) for j in jobs]
    by_workload: dict[str, list[tuple[Any, ...]]] = {w: [] for w in workloads}
    for r in results:
        by_workload[r[0]].append(r)
    rows = []
    for w in workloads:
        rs = by_workload[w]
        rows.append(
            {
                "workload": w,
                "seeds": len(rs),
                "alloc_ratio_100": round(sum(r[2] for r in rs) / len(rs), 2),
                "alloc_ratio_130": round(sum(r[3] for r in rs) / len(rs), 2),
                "pods_arrived": round(sum(r[4] for r in rs) / len(rs)),
                "pods_failed": round(sum(r[5] for r in rs) / len(rs)),
                "profile": {
                    "strategy": profile.strategy,
                    "weights": [profile.topology, profile.resource, profile.balance],
                    "fragmentation": profile.fragmentation,
                },
                "published_130": {p: round(pub[(w, p)][1], 2) for p in POLICIES if (w, p) in pub},
                "published_100": {p: round(pub[(w, p)][0], 2) for p in POLICIES if (w, p) in pub},
            }
        )
    if args.json:
        for row in rows:
            sys.stdout.write(orjson.dumps(row).decode() + "\n")
        return 0
    _print_table(rows)
    return 0


def _print_table(rows: list[dict[str, Any]]) -> None:
    policies = " ".join(f"{p[:8]:>8}" for p in POLICIES)
    head = f"{'workload':<12} {'load':>4} {'KGWE':>6} {policies}  vs best"
    print("GPU allocation ratio (% of GPU milli), mean over seeds; published = FGD ATC'23 expected results")
    print(head)
    print("-" * len(head))
    for row in rows:
        for load in ("100", "130"):
            pub = row[f"published_{load}"]
            best = max(pub.values()) if pub else float("nan")
            ours = row[f"alloc_ratio_{load}"]
            cells = " ".join(f"{pub.get(p, float('nan')):>8.2f}" for p in POLICIES)
            print(f"{row['workload']:<12} {load + '%':>4} {ours:>6.2f} {cells}  {ours - best:+.2f}")
    if rows:
        print(f"seeds per workload: {rows[0]['seeds']}; profile: {rows[0]['profile']}")
