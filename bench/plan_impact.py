"""`kgwe plan` impact replay benchmark: 7 days of demand on a 10,000-GPU cluster, replayed through a base
(BestFit) and a head (Spread) scoring profile.

Cluster: 1,000 DGX-A100 nodes (whole GPUs) and 250 DGX-H100 nodes whose GPUs are MIG-partitioned
2×1g.10gb + 2g.20gb + 3g.40gb. Demand (kgwe.impact.synth, seed 7): training pods of 1/2/4/8 whole GPUs
(mean 8 h, 70% offered load on the A100s), MIG inference pods (mean 24 h, 30% of the H100s), notebooks
sharing GPUs. Timed: decoding the encoded record and both replays (what `kgwe plan` adds), best of N runs.
Last line: JSON with `impact_seconds_7d_10k_gpus` and `demand_record_bytes`. --quick: 1,000 GPUs, 1 day.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime

from kgwe.extender.nodes import NodeState
from kgwe.extender.profile import Profile
from kgwe.impact.record import Shape, decode, encode
from kgwe.impact.replay import PolicyView, compare
from kgwe.impact.synth import TeamDemand, synthesize
from kgwe.topology import known

A100, H100 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"
LAYOUT = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def cluster(a100_nodes: int, h100_nodes: int) -> list[NodeState]:
    a, h = known.load("DGX-A100"), known.load("DGX-H100")
    nodes = [
        NodeState(name=f"a{i:05d}", gpus=8, product=A100, model=A100, topology=a) for i in range(a100_nodes)
    ]
    nodes += [
        NodeState(
            name=f"h{i:05d}",
            gpus=8,
            product=H100,
            model=H100,
            topology=h,
            gpu_used_milli=[1000] * 8,
            mig_free={p: 8 * n for p, n in LAYOUT.items()},
        )
        for i in range(h100_nodes)
    ]
    return nodes


def teams(a100_gpus: int, h100_gpus: int) -> list[TeamDemand]:
    return [
        TeamDemand(
            "ml-training",
            "ml-research",
            gpus=a100_gpus,
            shapes=(
                (Shape("whole", 1), 5),
                (Shape("whole", 2, preference="NVLinkOptimal"), 2),
                (Shape("whole", 4, preference="NVLinkOptimal"), 1),
                (Shape("whole", 8, preference="NVLinkOptimal"), 1),
            ),
            mean_hours=8,
            load=0.65,
        ),
        TeamDemand(
            "inference-prod",
            "inference-platform",
            gpus=h100_gpus,
            shapes=(
                (Shape("mig", 1, "1g.10gb"), 4),
                (Shape("mig", 1, "2g.20gb"), 2),
                (Shape("mig", 1, "3g.40gb"), 1),
            ),
            mean_hours=24,
            load=0.3,
        ),
        TeamDemand(
            "ds-notebooks",
            "data-science",
            gpus=a100_gpus // 20,
            shapes=((Shape("shared", 1, gpu_milli=250), 3), (Shape("shared", 1, gpu_milli=500), 2)),
            mean_hours=4,
            load=0.5,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1,000 GPUs, 1 day, one run")
    parser.add_argument("--runs", type=int, default=None, help="runs (default 3, --quick 1)")
    args = parser.parse_args()
    a_nodes, h_nodes, days = (100, 25, 1) if args.quick else (1000, 250, 7)
    runs = args.runs or (1 if args.quick else 3)
    nodes = cluster(a_nodes, h_nodes)
    record = synthesize(
        teams(a_nodes * 8, h_nodes * 8),
        gpus_by_product={A100: a_nodes * 8, H100: h_nodes * 8},
        nodes=len(nodes),
        until=datetime(2026, 11, 16, tzinfo=UTC),
        days=days,
    )
    t0 = time.perf_counter()
    data = encode(record)
    encode_s = time.perf_counter() - t0
    base = PolicyView(Profile(strategy="BestFit"), nodes)
    head = PolicyView(Profile(strategy="Spread"), nodes)
    best = best_cpu = float("inf")
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        decoded = decode(data)
        before, after = compare(decoded, base, head, seed=42)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    gpus = sum(n.gpus for n in nodes)
    print(
        f"{gpus} GPUs, {days} days: {record.pods_seen} pods metered, {len(decoded.pods)} in the record "
        f"({len(data)} bytes, encoded in {encode_s:.2f} s), {before.pods} replayed per revision "
        f"(scale {before.scale:.2f})"
    )
    for name, r in (("base BestFit", before), ("head Spread", after)):
        print(
            f"  {name}: allocation mean {r.alloc_mean_pct:.1f}% p10 {r.alloc_p10_pct:.1f}%, "
            f"waited {r.pods_waited} (mean {r.wait_mean_seconds / 60:.0f} min), "
            f"MIG served {r.mig_served}/{r.mig_pods}, fragmentation {r.fragmentation_pct:.2f}%"
        )
    print(f"decode + two replays: {best:.2f} s wall, {best_cpu:.2f} s CPU (best of {runs})")
    key = "impact_seconds_7d_10k_gpus" if not args.quick else "impact_seconds_1d_1k_gpus"
    print(
        json.dumps(
            {
                key: round(best, 2),
                "impact_seconds_7d_10k_gpus": round(best, 2) if not args.quick else None,
                "impact_cpu_seconds": round(best_cpu, 2),
                "demand_record_bytes": len(data),
                "pods_metered": record.pods_seen,
                "pods_replayed": before.pods,
                "gpus": gpus,
                "days": days,
            }
        )
    )


if __name__ == "__main__":
    main()
