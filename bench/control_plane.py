"""Benchmark of the local control plane: build cost, warm start, 1,000 GPU nodes, bare scheduler throughput.

    .venv/bin/python bench/control_plane.py [--quick] [--nodes N] [--pods N]

Prints figures, then one JSON line with cold_build_seconds, cache_mib, warm_start_seconds,
nodes_1000_ready_seconds, baseline_pods_per_second.

cold_build_seconds is what hack/cluster-bins.sh recorded when it built the cache (the build is not redone).
baseline_pods_per_second: pods are created while kube-scheduler is stopped, then it is started with
`kgwe.localcluster.controlplane.baseline_scheduler_config()` and we time first bind -> last bind. The extender
benchmark must use `baseline_scheduler_config(extenders=[...])` to be comparable.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client, watch

from kgwe.localcluster import gpunodes
from kgwe.localcluster.controlplane import ControlPlane, baseline_scheduler_config, find_binaries
from kgwe.localcluster.gotools import recorded_build_seconds

BASELINE_SCHEDULER = baseline_scheduler_config()
MACHINE_MIX = ("DGX-H100", "DGX-A100", "A100-PCIE-NVLINK-PAIRS", "L40S-8-PCIE", "DGX-1-V100")


def du_mib(path: Path) -> float:
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return round(int(out.split()[0]) / 1024, 1)


def create_nodes(api: client.ApiClient, count: int) -> tuple[list[str], float]:
    names = [f"bench-{MACHINE_MIX[i % len(MACHINE_MIX)].lower()}-{i:04d}" for i in range(count)]
    t0 = time.monotonic()
    for k, machine in enumerate(MACHINE_MIX):
        gpunodes.create_gpu_nodes(api, machine, names[k :: len(MACHINE_MIX)])
    gpunodes.wait_nodes_ready(api, names, timeout_seconds=300)
    return names, time.monotonic() - t0


def pod_body(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "bench",
                    "resources": {"requests": {"cpu": "100m"}, "limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


def scheduling_throughput(cp: ControlPlane, api: client.ApiClient, pods: int) -> tuple[float, float]:
    """(pods/s between first and last bind, seconds from scheduler ready to last bind)."""
    core = client.CoreV1Api(api)
    ns = "bench-scheduling"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(ns).items:
        if time.monotonic() > deadline:
            raise SystemExit("default ServiceAccount never appeared")
        time.sleep(0.05)
    cp.stop_scheduler()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: core.create_namespaced_pod(ns, pod_body(f"p-{i:05d}")), range(pods)))

    bound: dict[str, float] = {}
    done = threading.Event()
    listing = core.list_namespaced_pod(ns)

    def watcher() -> None:
        w = watch.Watch()
        while not done.is_set():
            rv = listing.metadata.resource_version
            for ev in w.stream(core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=10):
                pod = ev["object"]
                if pod.spec.node_name and pod.metadata.name not in bound:
                    bound[pod.metadata.name] = time.monotonic()
                    if len(bound) == pods:
                        done.set()
                        w.stop()
                        break

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    cp.start_scheduler(BASELINE_SCHEDULER)
    ready = time.monotonic()
    if not done.wait(timeout=600):
        raise SystemExit(f"only {len(bound)}/{pods} pods bound within 600 s")
    first, last = min(bound.values()), max(bound.values())
    return (pods - 1) / (last - first), last - ready


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="200 nodes / 500 pods instead of 1000 / 3000")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--pods", type=int)
    args = parser.parse_args()
    nodes = args.nodes or (200 if args.quick else 1000)
    pods = args.pods or (500 if args.quick else 3000)

    binaries = find_binaries(build=True)
    cold_build, how = recorded_build_seconds(binaries.directory, "kubernetes", binaries.kubernetes_version)
    cache_mib = du_mib(binaries.directory)
    print(f"binaries: {binaries.directory} ({', '.join(f'{k} {v}' for k, v in binaries.manifest.items())})")
    print(f"build (recorded by hack/cluster-bins.sh, {how}): {cold_build} s; binary cache: {cache_mib} MiB")

    cp = ControlPlane(binaries)
    t0 = time.monotonic()
    cp.start()
    warm = time.monotonic() - t0
    print(f"warm start (etcd + apiserver + kwok + scheduler ready): {warm:.1f} s")
    try:
        api = cp.new_api_client(pool_size=16)
        _, nodes_s = create_nodes(api, nodes)
        print(f"{nodes} simulated GPU nodes created and Ready (untainted): {nodes_s:.1f} s")
        rate, total = scheduling_throughput(cp, api, pods)
        print(
            f"bare kube-scheduler {binaries.kubernetes_version}: {pods} pods on {nodes} nodes, "
            f"{rate:.1f} pods/s (first->last bind); {total:.1f} s from scheduler ready to last bind"
        )
    finally:
        cp.stop()
    if nodes != 1000:
        print(f"note: nodes_1000_ready_seconds was measured with {nodes} nodes (--quick/--nodes)")
    print(
        json.dumps(
            {
                "cold_build_seconds": cold_build,
                "cache_mib": cache_mib,
                "warm_start_seconds": round(warm, 2),
                "nodes_1000_ready_seconds": round(nodes_s, 2),
                "baseline_pods_per_second": round(rate, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
