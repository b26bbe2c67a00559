"""Real kube-scheduler on simulated GPU nodes, with and without the KGWE extender, as deployed.

    .venv/bin/python bench/extender_e2e.py [--quick] [--nodes N] [--pods N] [--rate PODS_PER_S]

"Without" is the bare default scheduler (the control-plane benchmark's BASELINE_SCHEDULER config) and pods
that name no scheduler. "With" is what KGWE deploys: a second kube-scheduler running the configuration
`kgwe render` produces (profile kgwe-scheduler, the extender entry; rewritten only for this machine: the
kubeconfig, the extender's local URL, leader election off, and the baseline's client QPS/burst so that the
client rate limiter is not what is measured), and pods carrying `schedulerName: kgwe-scheduler`. One
scheduler runs at a time, so each phase's CPU is its own.
- pods_per_second_without / _with: pods created while the scheduler is stopped, then it is started, and
  we time first bind -> last bind. 1-GPU pods.
- p99_bind_ms: with the extender, pods created at 50 pods/s; creation (API call returned) -> bound seen
  by a watch, p99 over all pods. p99_submit_to_bound_ms counts from the moment the create request was sent.
The extender runs as its own process in cluster mode (watches, kgwe-scoring absent = the built-in default
profile, which decides in filter: one HTTP round trip per pod; --no-decide-in-filter: filter + prioritize).
The latency phase also runs without the extender first: the same machine's floor, printed beside it.
extender_cpu_ms_per_pod and apiserver_cpu_ms_per_pod_with / _without are CPU per pod in the latency phases
(apiserver_cpu_ratio_with_to_without: the apiserver's, with over without). ratio_with_to_without is
pods_per_second_with / _without, and *_cpu_ms_per_pod_throughput_with / _without the extender's, the
scheduler's and the apiserver's CPU per pod in the throughput phases (where the two CPUs are the limit).
The extender serves HTTPS and requires kube-scheduler's client certificate, as deployed (a throw-away
CA); --no-tls runs plain HTTP to show what mTLS costs. The extender watches only the KGWE
scheduler's bound pods; --extender-all-pods runs it with the older every-bound-pod watch, for comparison,
and --background-pods N adds N bound CPU-only pods (another scheduler's churn) beside each measured pod.

The measuring side stays light so that it does not take the 2 CPUs it measures: binds are observed by a
separate watcher process that parses raw watch lines with orjson (no client model objects), and the
creator does not decode the apiserver's replies. Each component's CPU per pod is printed.
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

import orjson
from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.harness
from control_plane import BASELINE_SCHEDULER, create_nodes, pod_body
from extender import pct, schedstat, wait_port

from kgwe.cluster.names import SCHEDULER_NAME
from kgwe.localcluster.controlplane import ControlPlane, find_binaries, free_port
from kgwe.localcluster.pki import extender_tls_flags, write_mtls_dirs
from kgwe.render.render import DEFAULT_EXTENDER_URL, standalone_extender_url
from tests.harness.kgwe_scheduler import LocalScheduler, local_config, rendered_config_text

REPO = Path(__file__).resolve().parents[1]


def kgwe_pod_body(name: str) -> dict:
    """The benchmark pod, routed to the KGWE scheduler as the admission webhook would route it."""
    body = pod_body(name)
    body["spec"]["schedulerName"] = SCHEDULER_NAME
    return body


class Schedulers:
    """The default scheduler (the harness's) and the KGWE scheduler; at most one runs at a time."""

    def __init__(
        self,
        cp: ControlPlane,
        extender_port: int,
        pids: dict,
        client_dir: Path | None,
        percentage: int | None = None,
    ) -> None:
        self.cp = cp
        self.pids = pids
        config = local_config(
            rendered_config_text(
                standalone_extender_url("kgwe-system") if client_dir else DEFAULT_EXTENDER_URL
            ),
            kubeconfig=cp.kubeconfig_path,
            extender_url=f"{'https' if client_dir else 'http'}://127.0.0.1:{extender_port}",
            client_dir=client_dir,
            leader_elect=False,
            client_connection={
                k: v for k, v in BASELINE_SCHEDULER["clientConnection"].items() if k != "kubeconfig"
            },
        )
        if client_dir is None:  # --no-tls: plain HTTP, to see what mTLS costs
            for ext in config.get("extenders") or []:
                ext["enableHTTPS"] = False
                ext.pop("tlsConfig", None)
        if percentage is not None:  # --percentage-of-nodes-to-score: an A/B of that one setting
            config["percentageOfNodesToScore"] = percentage
        self.percentage = config.get("percentageOfNodesToScore")
        self.kgwe = LocalScheduler(cp.binaries, Path(cp.workdir) / "kgwe-scheduler", config)

    def stop(self) -> None:
        self.cp.stop_scheduler()
        self.kgwe.stop()
        self.pids.pop("kube-scheduler", None)
        self.pids.pop("kgwe-scheduler", None)

    def start(self, with_extender: bool) -> None:
        self.stop()
        if with_extender:
            self.kgwe.start()
            self.pids["kgwe-scheduler"] = self.kgwe.pid
        else:
            self.cp.start_scheduler(BASELINE_SCHEDULER)
            self.pids["kube-scheduler"] = self.cp.pids["kube-scheduler"]


def make_namespace(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(ns).items:
        if time.monotonic() > deadline:
            raise SystemExit("default ServiceAccount never appeared")
        time.sleep(0.05)


def watch_bound(kubeconfig: str, ns: str, expected: int, timeout_seconds: float) -> int:
    """Child process: print "ready" once watching, then {pod: monotonic time first seen bound} as JSON.

    CLOCK_MONOTONIC is one clock for every process of the machine, so the parent can subtract its own
    creation times from these.
    """
    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    listing = orjson.loads(core.list_namespaced_pod(ns, _preload_content=False).data)
    rv = listing["metadata"]["resourceVersion"]
    bound: dict[str, float] = {}
    print("ready", flush=True)
    deadline = time.monotonic() + timeout_seconds
    while len(bound) < expected and time.monotonic() < deadline:
        resp = core.list_namespaced_pod(
            ns, watch=True, resource_version=rv, timeout_seconds=30, _preload_content=False
        )
        buf = b""
        for chunk in resp.stream(65536):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                ev = orjson.loads(line)
                obj = ev["object"]
                if ev["type"] == "ERROR":
                    raise SystemExit(f"watch error: {obj}")
                rv = obj["metadata"]["resourceVersion"]
                name = obj["metadata"]["name"]
                if obj["spec"].get("nodeName") and name not in bound:
                    bound[name] = time.monotonic()
            if len(bound) >= expected:
                break
        resp.release_conn()
    sys.stdout.write(orjson.dumps(bound).decode() + "\n")
    return 0


class BindWatcher:
    """The watcher process for one namespace; `result()` waits for it and returns its bind times."""

    def __init__(self, cp: ControlPlane, ns: str, expected: int, timeout_seconds: float) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--watch-bound",
                ns,
                "--expect",
                str(expected),
                "--kubeconfig",
                str(cp.kubeconfig_path),
                "--timeout",
                str(timeout_seconds),
            ],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("bind watcher did not start")
        self.timeout = timeout_seconds + 30

    def result(self, expected: int) -> dict[str, float]:
        out, _ = self.proc.communicate(timeout=self.timeout)
        bound = orjson.loads(out)
        if len(bound) < expected:
            raise SystemExit(f"only {len(bound)}/{expected} pods bound in time")
        return bound


def throughput(
    cp: ControlPlane, core: client.CoreV1Api, ns: str, pods: int, schedulers: Schedulers, with_extender: bool
) -> float:
    make_namespace(core, ns)
    schedulers.stop()
    body = kgwe_pod_body if with_extender else pod_body
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(
            pool.map(
                lambda i: core.create_namespaced_pod(ns, body(f"p-{i:05d}"), _preload_content=False),
                range(pods),
            )
        )
    watcher = BindWatcher(cp, ns, pods, 900)
    schedulers.start(with_extender)
    times = sorted(watcher.result(pods).values())
    return (pods - 1) / (times[-1] - times[0])


def nodes_used(core: client.CoreV1Api, ns: str) -> int:
    """Distinct nodes the pods of `ns` are bound to: how tightly the scheduler packed them (placement
    quality, beside the speed figures; 1-GPU pods on 8-GPU nodes pack into pods / 8 at best)."""
    items = orjson.loads(core.list_namespaced_pod(ns, _preload_content=False).data)["items"]
    return len({p["spec"].get("nodeName") for p in items} - {None})


def background_body(name: str, node: str) -> dict:
    """A CPU-only pod already bound to `node`: another scheduler's (or a DaemonSet's) pod churning there."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench-background"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "bench", "resources": {"requests": {"cpu": "10m"}}}],
        },
    }


def bind_latency(
    cp: ControlPlane,
    core: client.CoreV1Api,
    ns: str,
    pods: int,
    rate: float,
    body=pod_body,
    background: int = 0,
) -> tuple[list[float], list[float]]:
    """Sorted latencies in ms: (create returned -> bound, create sent -> bound). `background` bound CPU-only
    pods are created beside each measured pod, in a namespace of their own."""
    make_namespace(core, ns)
    nodes = [n.metadata.name for n in core.list_node().items] if background else []
    if background:
        make_namespace(core, ns + "-bg")
    bg_url = f"{core.api_client.configuration.host}/api/v1/namespaces/{ns}-bg/pods"
    watcher = BindWatcher(cp, ns, pods, 300)
    sent: dict[str, float] = {}
    returned: dict[str, float] = {}
    # the load generator sends pre-encoded bodies on the API client's own TLS connection pool: the client's
    # create_namespaced_pod spends ~5 ms of CPU per call, a tenth of a core at 50 pods/s
    pool = core.api_client.rest_client.pool_manager
    url = f"{core.api_client.configuration.host}/api/v1/namespaces/{ns}/pods"
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    start = time.monotonic()
    for i in range(pods):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        name = f"l-{i:05d}"
        sent[name] = time.monotonic()
        resp = pool.urlopen("POST", url, body=orjson.dumps(body(name)), headers=headers)
        returned[name] = time.monotonic()
        if resp.status != 201:
            raise SystemExit(f"creating {name}: HTTP {resp.status} {resp.data[:300]!r}")
        for j in range(background):
            bg = background_body(f"bg-{i:05d}-{j}", nodes[(i * background + j) % len(nodes)])
            pool.urlopen("POST", bg_url, body=orjson.dumps(bg), headers=headers)
    bound = watcher.result(pods)

    def ms(origin: dict[str, float]) -> list[float]:
        return sorted(max(0.0, bound[n] - t) * 1000.0 for n, t in origin.items())

    return ms(returned), ms(sent)


def latency_phase(
    cp: ControlPlane,
    core: client.CoreV1Api,
    ns: str,
    pods: int,
    rate: float,
    pids: dict,
    label: str,
    background: int = 0,
) -> tuple[list[float], list[float], dict[str, float]]:
    """bind_latency with the running scheduler, printed with percentiles; returns CPU ms per pod too."""
    before = cpu_breakdown(pids)
    body = kgwe_pod_body if label == "with" else pod_body
    lat, lat_sent = bind_latency(cp, core, ns, pods, rate, body, background)
    after = cpu_breakdown(pids)
    print(
        f"creation -> bound at {rate:g} pods/s {label} extender: p50 {pct(lat, 50):.1f} ms, "
        f"p90 {pct(lat, 90):.1f} ms, p99 {pct(lat, 99):.1f} ms, max {lat[-1]:.1f} ms "
        f"(from create sent: p99 {pct(lat_sent, 99):.1f} ms)",
        flush=True,
    )
    cpu = report_cpu(before, after, pods)
    return lat, lat_sent, cpu


def settle(core: client.CoreV1Api, ns: str, timeout_seconds: float = 180) -> None:
    """Wait until kwok has marked every pod of `ns` Running, then a little more: a latency phase must not
    start while the last phase's pod updates are still working through the apiserver."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        resp = core.list_namespaced_pod(
            ns, field_selector="status.phase!=Running", limit=1, _preload_content=False
        )
        if not orjson.loads(resp.data)["items"]:
            time.sleep(3)
            return
        time.sleep(0.5)
    raise SystemExit(f"pods of {ns} not Running after {timeout_seconds:.0f} s")


def extender_calls(port: int) -> dict[str, float]:
    """Answered calls per verb so far, from the extender's /metrics."""
    text = urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    out: dict[str, float] = {}
    for verb, n in re.findall(r'kgwe_extender_requests_total\{code="200",verb="([a-z]+)"\} (\S+)', text):
        out[verb] = out.get(verb, 0.0) + float(n)
    return out


def report_cpu(before: dict, after: dict, pods: int) -> dict[str, float]:
    """Print each component's CPU and run-queue wait per pod between two cpu_breakdown() readings.

    A process started in between (kube-scheduler is restarted per phase) is counted from its start."""
    rows = []
    for name, (pid, cpu1, wait1) in after.items():
        _, cpu0, wait0 = before[name] if before.get(name, (None,))[0] == pid else (pid, 0.0, 0.0)
        rows.append((name, (cpu1 - cpu0) / pods * 1000, (wait1 - wait0) / pods * 1000))
    rows.sort(key=lambda r: -r[1])
    print(
        f"  CPU per pod, ms (ms waiting for a CPU), load average {os.getloadavg()[0]:.1f}: "
        + ", ".join(f"{n} {c:.2f} ({w:.2f})" for n, c, w in rows)
        + f"; total {sum(r[1] for r in rows):.2f}",
        flush=True,
    )
    return {name: cpu for name, cpu, _ in rows}


def cpu_breakdown(pids: dict[str, int]) -> dict[str, tuple[int, float, float]]:
    """name -> (pid, CPU seconds, run-queue seconds) of each live process."""
    out = {}
    for name, pid in pids.items():
        try:
            out[name] = (pid, *schedstat(pid))
        except OSError:
            continue
    return out


def start_extender(
    cp: ControlPlane, probe_port: int, profiles: Path | None, all_pods: bool, server_dir: Path | None
) -> tuple[subprocess.Popen, int]:
    """The extender as deployed (HTTPS with a required client certificate unless `server_dir` is None);
    its plain probe port serves /readyz and /metrics to this script."""
    extra = ["--profiles", str(profiles)] if profiles else []
    extra += ["--all-pods"] if all_pods else []
    extra += ["--probe-listen", f"127.0.0.1:{probe_port}"]
    if server_dir is not None:
        extra += extender_tls_flags(server_dir)
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
    port = wait_port(proc)
    deadline = time.monotonic() + 60
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # drain its log
    while time.monotonic() < deadline:
        try:
            if urlopen(f"http://127.0.0.1:{probe_port}/readyz").status == 200:
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
    ap.add_argument("--rate", type=float, default=50.0, help="pods/s offered in the latency phase")
    ap.add_argument(
        "--node-lease-seconds",
        type=int,
        default=40,
        help="simulated kubelets' Lease duration (renewed at a quarter of it); 40 = kubelet's default",
    )
    ap.add_argument(
        "--no-decide-in-filter",
        action="store_true",
        help="profile decideInFilter: false (filter returns every feasible node, then prioritize)",
    )
    ap.add_argument(
        "--extender-all-pods",
        action="store_true",
        help="the extender watches every bound pod (the watch before it was narrowed to kgwe-scheduler pods)",
    )
    ap.add_argument(
        "--background-pods",
        type=int,
        default=0,
        help="latency phases: bound CPU-only pods created beside each measured pod (other schedulers' churn)",
    )
    ap.add_argument(
        "--no-tls",
        action="store_true",
        help="plain HTTP between kube-scheduler and the extender (deployed: HTTPS with client certificates)",
    )
    ap.add_argument(
        "--percentage-of-nodes-to-score",
        type=int,
        metavar="PCT",
        help="override the rendered KGWE scheduler's percentageOfNodesToScore (0 = adaptive)",
    )
    ap.add_argument("--watch-bound", metavar="NS", help=argparse.SUPPRESS)  # the watcher child process
    ap.add_argument("--expect", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=300.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.watch_bound:
        return watch_bound(args.kubeconfig, args.watch_bound, args.expect, args.timeout)
    nodes = args.nodes or (200 if args.quick else 1000)
    pods = args.pods or (400 if args.quick else 2000)
    latency_pods = args.latency_pods or (200 if args.quick else 1000)

    cp = ControlPlane(find_binaries(build=True), node_lease_seconds=args.node_lease_seconds)
    cp.start()
    ext = schedulers = None
    try:
        api = cp.new_api_client(pool_size=16)
        core = client.CoreV1Api(api)
        _, nodes_s = create_nodes(api, nodes)
        print(f"{nodes} simulated GPU nodes Ready in {nodes_s:.1f} s", flush=True)
        profiles = None
        if args.no_decide_in_filter:
            profiles = Path(cp.workdir) / "kgwe-scoring.json"
            profiles.write_text(
                json.dumps({"profiles": [{"name": "default", "default": True, "decideInFilter": False}]})
            )
        server_dir = client_dir = None
        if not args.no_tls:
            server_dir, client_dir = write_mtls_dirs(Path(cp.workdir) / "extender-mtls")
        probe = free_port()
        ext, port = start_extender(cp, probe, profiles, args.extender_all_pods, server_dir)
        pids = {**cp.pids, "extender": ext.pid, "bench (creator)": os.getpid()}
        schedulers = Schedulers(cp, port, pids, client_dir, args.percentage_of_nodes_to_score)

        def run_scheduler(with_extender: bool) -> None:
            schedulers.start(with_extender)
            time.sleep(5)  # past its start-up: caches filled from the initial lists, first collections done

        before = cpu_breakdown(pids)
        without = throughput(cp, core, "bench-without", pods, schedulers, False)
        after = cpu_breakdown(pids)
        print(f"without extender: {without:.1f} pods/s ({pods} pods)", flush=True)
        tp_without = report_cpu(before, after, pods)
        settle(core, "bench-without")
        before, calls0 = cpu_breakdown(pids), extender_calls(probe)
        with_ext = throughput(cp, core, "bench-with", pods, schedulers, True)
        after, calls1 = cpu_breakdown(pids), extender_calls(probe)
        print(
            f"with extender:    {with_ext:.1f} pods/s ({pods} pods); extender calls per pod: "
            + ", ".join(
                f"{v} {(calls1.get(v, 0) - calls0.get(v, 0)) / pods:.2f}" for v in ("filter", "prioritize")
            ),
            flush=True,
        )
        tp_with = report_cpu(before, after, pods)
        packed_on = nodes_used(core, "bench-with")
        print(f"  the {pods} pods with the extender are on {packed_on} nodes", flush=True)
        settle(core, "bench-with")
        # both latency phases on the cluster the throughput phases left; the baseline first, so the fuller
        # cluster of the second phase counts against KGWE, not for it
        run_scheduler(False)
        base_lat, _, cpu_without = latency_phase(
            cp,
            core,
            "bench-latency-without",
            latency_pods,
            args.rate,
            pids,
            "without",
            args.background_pods,
        )
        settle(core, "bench-latency-without")
        if args.background_pods:
            settle(core, "bench-latency-without-bg")
        run_scheduler(True)
        calls0 = extender_calls(probe)
        lat, lat_sent, cpu_with = latency_phase(
            cp, core, "bench-latency", latency_pods, args.rate, pids, "with", args.background_pods
        )
        calls1 = extender_calls(probe)
        print(
            "  extender calls per pod: "
            + ", ".join(
                f"{v} {(calls1.get(v, 0) - calls0.get(v, 0)) / latency_pods:.2f}"
                for v in ("filter", "prioritize")
            ),
            flush=True,
        )
        p50, p99, p99_sent = pct(lat, 50), pct(lat, 99), pct(lat_sent, 99)
    finally:
        if schedulers is not None:
            schedulers.stop()
        if ext is not None:
            ext.terminate()
            ext.wait(timeout=10)
        cp.stop()
    api_with, api_without = cpu_with.get("kube-apiserver", 0.0), cpu_without.get("kube-apiserver", 0.0)
    print(
        json.dumps(
            {
                "pods_per_second_with": round(with_ext, 1),
                "pods_per_second_without": round(without, 1),
                "p99_bind_ms": round(p99, 1),
                "p99_bind_ms_without": round(pct(base_lat, 99), 1),
                "p50_bind_ms": round(p50, 1),
                "p99_submit_to_bound_ms": round(p99_sent, 1),
                "decide_in_filter": not args.no_decide_in_filter,
                "node_lease_seconds": args.node_lease_seconds,
                "nodes": nodes,
                "extender_cpu_ms_per_pod": round(cpu_with.get("extender", 0.0), 2),
                "apiserver_cpu_ms_per_pod_with": round(api_with, 2),
                "apiserver_cpu_ms_per_pod_without": round(api_without, 2),
                "apiserver_cpu_ratio_with_to_without": round(api_with / api_without, 2)
                if api_without
                else None,
                "ratio_with_to_without": round(with_ext / without, 2) if without else None,
                "tls": not args.no_tls,
                "percentage_of_nodes_to_score": schedulers.percentage if schedulers else None,
                "nodes_used_with": packed_on,
                **{
                    f"{key}_cpu_ms_per_pod_throughput_{phase}": round(cpu.get(name, 0.0), 2)
                    for phase, cpu, sched in (
                        ("with", tp_with, "kgwe-scheduler"),
                        ("without", tp_without, "kube-scheduler"),
                    )
                    for key, name in (
                        ("extender", "extender"),
                        ("scheduler", sched),
                        ("apiserver", "kube-apiserver"),
                    )
                },
                "extender_watch": "all bound pods" if args.extender_all_pods else "kgwe-scheduler pods",
                "background_pods_per_pod": args.background_pods,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
