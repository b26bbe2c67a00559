"""What kube-scheduler's node sampling (percentageOfNodesToScore) costs KGWE's placement: the openb fill-up
replay (kgwe simulate's method) with the extender's core choosing among every node, and among the sample
kube-scheduler would send it.

    .venv/bin/python bench/node_sampling.py [--quick] [--workload W ...] [--seeds N]

The sample is modelled as kube-scheduler v1.37 takes it (docs/facts/scheduler.md): nodes in a fixed order,
starting where the previous pod's search stopped, until max(100, N x max(5, 50 - N/125) %) nodes that
kube-scheduler's own filters pass are found (the extender-only checks, shares, product, family, memory and
topology, do not count against a node there). The pod then goes to the extender's best node of the sample.
Per workload and setting: GPU allocation at 100% and 130% arrived load, pods that found no node, and of
those the ones a node outside the sample could have taken (in a cluster: a FailedScheduling event and a
retry with the next sample; here, as in the FGD method, the pod is dropped).

Last line: {"workload": {"every_node": {...}, "sampled": {...}}, ...}.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from kgwe.extender.core import NodeTable, Reason, ShapeCache
from kgwe.extender.nodes import NodeState
from kgwe.extender.profile import DEFAULT_PROFILE
from kgwe.sim.openb import load_nodes, load_pods, workload_mix
from kgwe.sim.replay import sample_pods

# reasons kube-scheduler's own filters also see (resources it counts); the others only KGWE checks
KUBE_SCHEDULER_REJECTS = np.array([Reason.NO_GPU, Reason.WHOLE, Reason.MIG, Reason.CPU, Reason.RAM])


def nodes_to_find(n: int, percentage: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind (0 = adaptive)."""
    if n < 100:
        return n
    if percentage == 0:
        percentage = max(5, 50 - n // 125)
    return max(100, n * percentage // 100)


def replay_sampled(workload: str, seed: int, percentage: int) -> dict[str, float]:
    nodes, pods = load_nodes(), load_pods(workload)
    table = NodeTable(max_gpus=max(n.gpus for n in nodes), capacity=len(nodes))
    for n in nodes:
        table.upsert(NodeState(**{**n.__dict__, "gpu_used_milli": list(n.gpu_used_milli)}))
    profile = DEFAULT_PROFILE
    if profile.fragmentation > 0:
        table.set_mix(workload_mix(pods))
    cache = ShapeCache(table, max_shapes=4096)
    capacity = int(sum(n.gpus for n in nodes)) * 1000
    rows = np.nonzero(table.live)[0]
    total, start = len(rows), 0
    wanted = nodes_to_find(total, percentage)
    arrived = allocated = failed = missed = 0
    at_100 = None
    for pod in sample_pods(pods, capacity, seed):
        req = pod.req
        reason, score, best = cache.answer(rows, req, profile)
        ok = reason == 0
        order = (start + np.arange(total)) % total
        found = np.cumsum(~np.isin(reason[order], KUBE_SCHEDULER_REJECTS))
        examined = int(np.searchsorted(found, wanted)) + 1 if found[-1] > wanted else total
        window = order[:examined]
        start = (start + examined) % total
        fits = window[ok[window]]
        if len(fits):
            i = int(fits[np.argmax(score[fits])])
            table.allocate(int(rows[i]), req, table.choose_gpus(int(rows[i]), req, int(best[i])))
            allocated += req.gpu_milli_total
        else:
            failed += 1
            missed += bool(ok.any())
        arrived += req.gpu_milli_total
        if at_100 is None and arrived >= capacity:
            at_100 = allocated
    return {
        "alloc_ratio_100": 100.0 * (at_100 or allocated) / capacity,
        "alloc_ratio_130": 100.0 * allocated / capacity,
        "pods_failed": failed,
        "failed_with_a_node_outside_the_sample": missed,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="workload default, one seed")
    ap.add_argument(
        "--workload", action="append", help="openb workload (default: default, gpuspec33, gpushare100)"
    )
    ap.add_argument("--seeds", type=int, help="seeds 42, 43, ... (default 2)")
    args = ap.parse_args()
    workloads = args.workload or (["default"] if args.quick else ["default", "gpuspec33", "gpushare100"])
    seeds = args.seeds or (1 if args.quick else 2)
    out: dict[str, dict] = {}
    for w in workloads:
        out[w] = {}
        for label, percentage in (("every_node", 100), ("sampled", 0)):
            runs = [replay_sampled(w, 42 + s, percentage) for s in range(seeds)]
            mean = {k: round(sum(r[k] for r in runs) / seeds, 2) for k in runs[0]}
            out[w][label] = mean
            print(f"{w} {label}: {mean}", flush=True)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
