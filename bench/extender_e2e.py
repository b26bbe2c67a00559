"""Real kube-scheduler on simulated GPU nodes, with and without the KGWE extender.

    .venv/bin/python bench/extender_e2e.py [--quick] [--nodes N] [--pods N]

- pods_per_second_without / _with: pods created while kube-scheduler is stopped, then it is started (the
  control-plane benchmark's BASELINE_SCHEDULER config; "with" adds KGWE's extender entry and
  percentageOfNodesToScore 100) and we time first bind -> last bind. 1-GPU pods.
- p99_bind_ms: with the extender, pods created at 50 pods/s; creation (API call returned) -> bound seen
  by a watch, p99 over all pods.
The extender runs as its own process in cluster mode (watches, kgwe-scoring absent = built-in default;
--decide-in-filter: the default profile with decideInFilter, one HTTP round trip per pod).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.request import urlopen

from kubernetes import client, watch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from control_plane import BASELINE_SCHEDULER, create_nodes, pod_body
from extender import schedstat

from kgwe.extender.schedconfig import extender_entry
from kgwe.testing.controlplane import ControlPlane, find_binaries

REPO = Path(__file__).resolve().parents[1]


def make_namespace(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(ns).items:
        if time.monotonic() > deadline:
            raise SystemExit("default ServiceAccount never appeared")
        time.sleep(0.05)


class BindWatcher:
    """Records the monotonic time each pod of a namespace is first seen bound."""

    def __init__(self, core: client.CoreV1Api, ns: str) -> None:
        self.core, self.ns = core, ns
        self.bound: dict[str, float] = {}
        self.expected = 0
        self.done = threading.Event()
        self._rv = core.list_namespaced_pod(ns).metadata.resource_version
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        w = watch.Watch()
        while not self.done.is_set():
            for ev in w.stream(
                self.core.list_namespaced_pod, self.ns, resource_version=self._rv, timeout_seconds=10
            ):
                pod = ev["object"]
                self._rv = pod.metadata.resource_version
                if pod.spec.node_name and pod.metadata.name not in self.bound:
                    self.bound[pod.metadata.name] = time.monotonic()
                    if self.expected and len(self.bound) >= self.expected:
                        self.done.set()
                        w.stop()
                        break


def throughput(cp: ControlPlane, core: client.CoreV1Api, ns: str, pods: int, config: dict) -> float:
    make_namespace(core, ns)
    cp.stop_scheduler()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: core.create_namespaced_pod(ns, pod_body(f"p-{i:05d}")), range(pods)))
    watcher = BindWatcher(core, ns)
    watcher.expected = pods
    cp.start_scheduler(config)
    if not watcher.done.wait(timeout=900):
        raise SystemExit(f"only {len(watcher.bound)}/{pods} pods bound within 900 s")
    times = sorted(watcher.bound.values())
    return (pods - 1) / (times[-1] - times[0])


def bind_latency(core: client.CoreV1Api, ns: str, pods: int, rate: float) -> list[float]:
    make_namespace(core, ns)
    watcher = BindWatcher(core, ns)
    watcher.expected = pods
    created: dict[str, float] = {}
    start = time.monotonic()
    for i in range(pods):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        name = f"l-{i:05d}"
        core.create_namespaced_pod(ns, pod_body(name))
        created[name] = time.monotonic()
    if not watcher.done.wait(timeout=300):
        raise SystemExit(f"only {len(watcher.bound)}/{pods} latency pods bound")
    return sorted(max(0.0, watcher.bound[n] - created[n]) * 1000.0 for n in created)


def start_extender(cp: ControlPlane, profiles: Path | None = None) -> tuple[subprocess.Popen, int]:
    extra = ["--profiles", str(profiles)] if profiles else []
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kgwe.cli",
            "extender",
            "--kubeconfig",
            str(cp.kubeconfig_path),
            "--listen",
            "127.0.0.1:0",
            *extra,
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
        if not line and proc.poll() is not None:
            raise SystemExit("extender exited")
    else:
        raise SystemExit("extender did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # drain its log
    while time.monotonic() < deadline:
        try:
            if urlopen(f"http://127.0.0.1:{port}/readyz").status == 200:
                return proc, port
        except OSError:
            time.sleep(0.2)
    raise SystemExit("extender never became ready")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 nodes, 400 pods, 200 latency pods")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--pods", type=int)
    ap.add_argument("--latency-pods", type=int)
    ap.add_argument(
        "--decide-in-filter",
        action="store_true",
        help="profile decideInFilter: filter returns the best node only (no prioritize call)",
    )
    args = ap.parse_args()
    nodes = args.nodes or (200 if args.quick else 1000)
    pods = args.pods or (400 if args.quick else 2000)
    latency_pods = args.latency_pods or (200 if args.quick else 1000)

    cp = ControlPlane(find_binaries(build=True))
    cp.start()
    ext = None
    try:
        api = cp.new_api_client(pool_size=16)
        core = client.CoreV1Api(api)
        _, nodes_s = create_nodes(api, nodes)
        print(f"{nodes} simulated GPU nodes Ready in {nodes_s:.1f} s", flush=True)
        profiles = None
        if args.decide_in_filter:
            profiles = Path(cp.workdir) / "kgwe-scoring.json"
            profiles.write_text(
                json.dumps({"profiles": [{"name": "default", "default": True, "decideInFilter": True}]})
            )
        ext, port = start_extender(cp, profiles)
        with_config = {
            **BASELINE_SCHEDULER,
            "percentageOfNodesToScore": 100,
            "extenders": [extender_entry(f"http://127.0.0.1:{port}")],
        }
        without = throughput(cp, core, "bench-without", pods, BASELINE_SCHEDULER)
        print(f"without extender: {without:.1f} pods/s ({pods} pods)", flush=True)
        cpu0, wait0 = schedstat(ext.pid)
        with_ext = throughput(cp, core, "bench-with", pods, with_config)
        cpu1, wait1 = schedstat(ext.pid)
        print(
            f"with extender:    {with_ext:.1f} pods/s ({pods} pods); extender used {cpu1 - cpu0:.1f} s CPU "
            f"({(cpu1 - cpu0) / pods * 1000:.2f} ms/pod) and waited {wait1 - wait0:.1f} s for a CPU "
            f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
            flush=True,
        )
        lat = bind_latency(core, "bench-latency", latency_pods, 50.0)
        p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        print(f"creation -> bound at 50 pods/s with extender: p50 {p50:.1f} ms, p99 {p99:.1f} ms", flush=True)
    finally:
        if ext is not None:
            ext.terminate()
            ext.wait(timeout=10)
        cp.stop()
    print(
        json.dumps(
            {
                "pods_per_second_with": round(with_ext, 1),
                "pods_per_second_without": round(without, 1),
                "p99_bind_ms": round(p99, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
