"""MIG rebalancing benchmark: a day of demand from the Alibaba openb trace through the planner
with the demand-driven rebalancing rule vs the static layout.

Demand: the openb default pod list, pods with num_gpu == 1 and 0 < gpu_milli < 1000 (3,078), each one
instance of the smallest H100-80GB profile covering gpu_milli/1000 of the compute and the memory slices
(kgwe.sim.openb.mig_profile, as bench/mig_planner.py; mostly 7g.80gb and 4g.40gb, then 3g.40gb and
2g.20gb, few 1g). Arrival = creation_time; runtime = deletion_time - creation_time, kept as recorded
(rounded up to whole minutes). The creation times from the 1st percentile to the last (33.4 days) are
compressed linearly onto 24 h; the 30 earlier pods (9 of them scattered over the 110 days before) are
dropped. The day thus sees the trace's arrival sequence and bursts 33.4x faster, with real runtimes.
Nothing is sampled: the replay is deterministic.

Pool: N DGX H100 nodes x 8 GPUs, N the fewest whose compute slices hold the offered peak (the compute
slices pods would hold had each started on arrival) at most LOAD times over. The
rule's settings are the sample repo's inference-h100 MIGStrategy's: rebalanceInterval 5m, window and
rebalanceMaxGPUs at their defaults (15 min, 25% of the pool's GPUs). Two share policies, each run static and
dynamic from the same start:
  inference-h100  that strategy's preferredProfiles (1g.10gb 70%, 2g.20gb 20%, 3g.40gb 10%): a pool laid
                  out for other work than the trace's (the main JSON keys);
  day mix         each profile's share of the compute-slice-minutes the day asks: the best a layout fixed
                  in advance could know (keys ending in _day_mix).
  static  plan_pool with the shares on the fresh pool, never changed;
  dynamic the same start, then the controller's rule (kgwe.planner.rebalance.evaluate) every minute it is
          due; a decision's nodes (idle ones: the rule pins nodes that hold a pod) serve nothing for DELAY
          minutes of MIG reconfiguration (assumed: operands paused, instances rebuilt, the device plugin
          advertising again), then run the decided layouts.
Simulation (kgwe.sim.mig_rebalance): 1-minute steps, first come first served per profile, first fit.
Served = instance-minutes run within the day / instance-minutes asked had every pod started on arrival;
repartitions_per_hour = GPUs repartitioned / hours; pending-pod-minutes = pods waiting, summed over minutes.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from decimal import Decimal

from kgwe.gpu import catalog
from kgwe.planner.model import GPUState
from kgwe.sim.mig_day import (
    DELAY,
    GPUS_PER_NODE,
    MODEL_KEY,
    day_shares,
    laid_out,
    pool_gpus,
    sample_strategy,
    settings_for,
    trace_day,
)
from kgwe.sim.mig_rebalance import Pod, Rebalancing, Result, offered, simulate

MODEL = catalog.model_by_key(MODEL_KEY)


def line(name: str, r: Result) -> str:
    return (
        f"  {name:8s} served {r.served_fraction:.4f} of {r.demanded:,} instance-minutes; pods started "
        f"{r.started}/{r.pods}; pending-pod-minutes {r.pending_pod_minutes:,}"
    )


def compare(
    pods: list[Pod], minutes: int, gpus: tuple[GPUState, ...], shares: dict[str, Decimal], rule: Rebalancing
) -> dict[str, float | int]:
    """Static vs dynamic on a pool laid out for `shares` (percent); the five figures and the rule's work."""
    pool = laid_out(gpus, shares)
    layout = Counter(name for g in pool.gpus for name, _ in g.layout or ())
    print(
        f"shares { ({k: f'{v}%' for k, v in shares.items()}) }: static layout {dict(sorted(layout.items()))}"
    )
    static = simulate(pods, pool, minutes)
    dynamic = simulate(pods, pool, minutes, rule)
    print(line("static", static))
    print(line("dynamic", dynamic))
    print(
        f"  {dynamic.gpus_repartitioned} GPUs repartitioned by {len(dynamic.repartitions)} decisions "
        f"({dynamic.decisions - len(dynamic.repartitions)} more decisions changed no GPU); first ones:"
    )
    for r in dynamic.repartitions[:3]:
        print(f"    {r.minute // 60:02d}:{r.minute % 60:02d} {r.message}")
    return {
        "served_static": round(static.served_fraction, 4),
        "served_dynamic": round(dynamic.served_fraction, 4),
        "repartitions_per_hour": round(dynamic.gpus_repartitioned / (minutes / 60), 2),
        "pending_pod_minutes_static": static.pending_pod_minutes,
        "pending_pod_minutes_dynamic": dynamic.pending_pod_minutes,
        "decisions": dynamic.decisions,
        "decisions_repartitioning": len(dynamic.repartitions),
        "evaluations": dynamic.evaluations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the day's first 6 h (a smaller pool)")
    parser.add_argument("--hours", type=float, default=None, help="replay the day's first H hours (24)")
    parser.add_argument("--nodes", type=int, default=None, help="pool nodes (default: sized by LOAD)")
    parser.add_argument("--delay", type=int, default=DELAY, help=f"reconfiguration minutes ({DELAY})")
    args = parser.parse_args()
    minutes = int(60 * (args.hours or (6 if args.quick else 24)))
    t0, c0 = time.perf_counter(), time.process_time()
    day, factor = trace_day()
    pods = [p for p in day if p.arrival < minutes]
    slices = {name: p.compute_slices for name, p in MODEL.profiles.items()}
    peak = max(offered(pods, minutes, slices))
    per_node = GPUS_PER_NODE * MODEL.compute_slots
    gpus = pool_gpus(pods, minutes, args.nodes)
    nodes = len(gpus) // GPUS_PER_NODE
    strategy = sample_strategy()
    settings = settings_for(strategy, len(gpus))
    rule = Rebalancing(settings, args.delay)
    print(
        f"openb: {len(pods)} fractional pods over {minutes / 60:g} h (arrivals compressed {factor:.1f}x, "
        f"runtimes as recorded); profiles {dict(Counter(p.profile for p in pods).most_common())}"
    )
    print(
        f"pool: {nodes} nodes x {GPUS_PER_NODE} H100-80GB; offered peak {peak} compute slices = "
        f"{peak / (nodes * per_node):.0%} of capacity; rule: interval {settings.interval}, window "
        f"{settings.window}, at most {settings.max_gpus} GPUs per decision, reconfiguration {args.delay} min"
    )
    print("the sample repo's inference-h100 shares:")
    result = compare(pods, minutes, gpus, strategy.shares, rule)
    print("the day's own mix as shares (a static layout that knew the day in advance):")
    day_mix = compare(pods, minutes, gpus, day_shares(pods, minutes), rule)
    result.update({f"{k}_day_mix": v for k, v in day_mix.items()})
    result.update(
        {
            "pods": len(pods),
            "gpus": len(gpus),
            "hours": minutes / 60,
            "reconfiguration_minutes": args.delay,
            "wall_seconds": round(time.perf_counter() - t0, 1),
            "cpu_seconds": round(time.process_time() - c0, 1),
        }
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
