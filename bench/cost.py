"""Cost engine figures: chargeback on 1M intervals (SQLite and a real PostgreSQL), forecast accuracy on
Helios/Philly daily series (7-day horizon, rolling origin, vs seasonal-naive), rightsizing on the
Alibaba GenAI per-pod series. Last line: one JSON object.

    .venv/bin/python bench/cost.py [--quick] [--intervals N]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from kgwe.cost import datasets
from kgwe.cost.evaluation import evaluate_rightsizing, forecast_accuracy
from kgwe.cost.pricing import pricebook
from kgwe.cost.store import CostStore
from kgwe.cost.usage import NodeCapacity, UsageInterval, month_period

PRODUCTS = {"NVIDIA-H100-80GB-HBM3": ("4.10", "1.60"), "NVIDIA-A100-SXM4-80GB": ("2.45", "0.98")}
PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
MONTH = month_period(datetime(2026, 10, 1, tzinfo=UTC))


def synthetic(n: int, seed: int = 1):
    """n intervals on n/1000 (at least 50) eight-GPU nodes over October 2026 (some straddle the month
    edges); about 45% of the capacity is allocated, so idle is a real line."""
    rng = random.Random(seed)
    nodes = [
        NodeCapacity(
            f"node-{i:04d}", list(PRODUCTS)[i % 2], 8, MONTH.since - timedelta(days=3), None, spot=i % 5 == 0
        )
        for i in range(max(50, n // 1000))
    ]
    span = int((MONTH.until - MONTH.since).total_seconds())

    def gen():
        for i in range(n):
            node = nodes[rng.randrange(len(nodes))]
            start = MONTH.since + timedelta(seconds=rng.randrange(-86400, span))
            end = start + timedelta(seconds=rng.randrange(60, 6 * 3600))
            team = rng.randrange(12)
            kind = rng.choices(["whole", "mig", "shared"], [5, 3, 2])[0]
            extra = {
                "mig": {"mig_profile": rng.choice(PROFILES)},
                "shared": {"gpu_milli": rng.choice([250, 500])},
                "whole": {},
            }[kind]
            yield UsageInterval(
                f"pod-{i}",
                f"ns-{team}-{rng.randrange(4)}",
                f"team-{team}",
                node.node,
                node.gpu_product,
                kind,
                rng.randint(1, 2),
                start,
                end,
                spot=node.spot,
                pod_uid=f"uid-{i}",
                **extra,
            )

    return nodes, gen


def chargeback_seconds(url: str, n: int, book) -> tuple[float, float, str]:
    store = CostStore(url)
    store.migrate()
    nodes, gen = synthetic(n)
    t = time.perf_counter()
    store.add_usage(gen())
    for node in nodes:
        store.set_node(node)
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    cb = store.chargeback(book, MONTH, now=MONTH.until, granularity="month", group_by=("team", "namespace"))
    seconds = time.perf_counter() - t
    assert cb.allocated_cost + cb.idle_cost_total == cb.cluster_cost
    store.close()
    summary = f"{cb.cluster_cost} {cb.currency} ({len(cb.lines)} lines, idle {cb.idle_cost_total})"
    return seconds, load_s, summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="100k intervals instead of 1M")
    ap.add_argument("--intervals", type=int, default=None)
    args = ap.parse_args()
    n = args.intervals or (100_000 if args.quick else 1_000_000)
    book = pricebook(
        [{"product": p, "onDemandPerHour": od, "spotPerHour": sp} for p, (od, sp) in PRODUCTS.items()]
    )

    with tempfile.TemporaryDirectory() as tmp:
        sqlite_s, load_s, total = chargeback_seconds(f"sqlite:///{Path(tmp) / 'bench.db'}", n, book)
    print(
        f"chargeback, {n:,} intervals, October by team+namespace: SQLite {sqlite_s:.2f} s "
        f"(load {load_s:.0f} s) -> {total}"
    )
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.harness
    from tests.harness.postgres import PostgresServer

    with PostgresServer() as pg:
        pg_s, load_s, total = chargeback_seconds(pg.url, n, book)
    print(f"chargeback, {n:,} intervals: PostgreSQL {pg_s:.2f} s (load {load_s:.0f} s) -> {total}")

    series = {
        "helios-earth-vc6YE (GPU-hours/day)": datasets.helios_earth_daily_gpu_hours(),
        "philly-node-sequence (node-hours/day)": datasets.philly_daily_node_hours(),
    }
    acc = forecast_accuracy(series)
    for name, r in acc.items():
        gain = 100 * (1 - r["kgwe"] / r["seasonal_naive"])
        print(
            f"forecast 7-day rolling origin, {name}, {int(r['days'])} days: MAPE KGWE {r['kgwe']:.2f}% vs "
            f"seasonal-naive {r['seasonal_naive']:.2f}% ({gain:+.1f}% lower error)"
        )
    mape_kgwe = sum(r["kgwe"] for r in acc.values()) / len(acc)
    mape_naive = sum(r["seasonal_naive"] for r in acc.values()) / len(acc)
    target = "met" if mape_kgwe <= 0.8 * mape_naive else "NOT met"
    print(
        f"forecast mean over series: KGWE {mape_kgwe:.2f}% vs seasonal-naive {mape_naive:.2f}% "
        f"({100 * (1 - mape_kgwe / mape_naive):.1f}% lower; target >= 20% lower: {target}; "
        "per series above)"
    )

    price = Decimal(PRODUCTS["NVIDIA-A100-SXM4-80GB"][0])
    ev = evaluate_rightsizing(datasets.genai_pod_series(), "NVIDIA-A100-SXM4-80GB", price)
    share = 100 * ev.downsizable / max(ev.recommended, 1)
    print(
        f"rightsizing GenAI (each pod assumed on 1 A100-80GB; recommend on first half, check on second): "
        f"{ev.downsizable}/{ev.recommended} pods downsizable ({share:.0f}%), {ev.idle} idle; "
        f"{ev.gpu_hours_saved:.0f} of {ev.gpu_hours_observed:.0f} GPU-hours saved (${ev.cost_saved} at "
        f"${price}/h); undersized at {ev.undersized_samples} of {ev.test_samples} held-out samples, in "
        f"{ev.pods_with_undersized_sample} pods; sizes {ev.profiles}"
    )
    print(
        json.dumps(
            {
                "chargeback_seconds_1m_sqlite": round(sqlite_s, 3),
                "chargeback_seconds_1m_postgres": round(pg_s, 3),
                "mape_kgwe": round(mape_kgwe, 3),
                "mape_seasonal_naive": round(mape_naive, 3),
                "rightsizing_pods_downsizable": ev.downsizable,
                "rightsizing_undersized_samples": ev.undersized_samples,
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
