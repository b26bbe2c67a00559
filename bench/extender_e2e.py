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
(extender_preemptions_per_pod: how often the extender's threads were taken off a CPU meanwhile; on a busy
machine each such switch sends them back to cold caches, which inflates their CPU time)
(apiserver_cpu_ratio_with_to_without: the apiserver's, with over without). ratio_with_to_without is
pods_per_second_with / _without, and *_cpu_ms_per_pod_throughput_with / _without the extender's, the
scheduler's and the apiserver's CPU per pod in the throughput phases (where the two CPUs are the limit).
The extender runs as deployed by default: a sidecar of the kgwe-scheduler pod, plain HTTP on loopback
(only that pod's containers can reach it); --mtls runs the standalone shape instead (HTTPS with a required
client certificate, a throw-away CA), to show what mutual TLS costs. The extender watches only the KGWE
scheduler's pods; --extender-all-pods runs it with the older every-bound-pod watch, for comparison,
and --background-pods N adds N bound CPU-only pods (another scheduler's churn) beside each measured pod.

extender_cpu_breakdown_ms: where the extender's CPU per pod goes, from one more latency phase (as many pods,
unless --no-profile) run against the same extender started through bench/extender_parts.py, which counts
each thread's CPU per part (HTTP, TLS, JSON decode and encode, pod parsing, the decision, the assumption
after it, watch reading, decoding and applying, metrics, logging, garbage collection, the event loop);
"other" is the process's CPU beyond the parts. Beside it: extender_cpu_ms_per_pod_profiled (that process's
CPU per pod, wrappers included), extender_watch_events_per_pod by kind and type, and per pod the HTTP
requests, connections and TLS handshakes the extender served. --floor adds one more latency phase against
bench/extender_floor.py, the product's server and watches doing no work: floor_cpu_ms_per_pod is what the
plumbing under the extender costs per pod on this machine at that moment, which no change to KGWE's own
logic removes. --floor also runs a throughput phase between the two others (its pods deleted after) with
the KGWE scheduler calling that do-nothing extender: floor_pods_per_second, and
floor_ratio_with_to_without (that ÷ pods_per_second_without) is the bound ratio_with_to_without can reach
with an extender on these parts; with_to_floor is pods_per_second_with ÷ floor_pods_per_second.

The measuring side stays light so that it does not take the 2 CPUs it measures: binds are observed by a
separate watcher process that parses raw watch lines with orjson (no client model objects), and the
creator does not decode the apiserver's replies. Each component's CPU per pod is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.request import urlopen

import orjson
from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.harness
from control_plane import BASELINE_SCHEDULER, create_nodes, pod_body
from extender import pct, schedstat, wait_port

from kgwe.localcluster.controlplane import ControlPlane, ControlPlaneError, find_binaries, free_port
from kgwe.localcluster.pki import extender_tls_flags, write_mtls_dirs
from kgwe.render.render import DEFAULT_EXTENDER_URL, standalone_extender_url
from kgwe.vocab import SCHEDULER_NAME
from tests.harness.kgwe_scheduler import LocalScheduler, local_config, rendered_config_text

REPO = Path(__file__).resolve().parents[1]


def kgwe_pod_body(name: str) -> dict:
    """The benchmark pod, routed to the KGWE scheduler as the admission webhook would route it."""
    body = pod_body(name)
    body["spec"]["schedulerName"] = SCHEDULER_NAME
    return body


@dataclass(frozen=True)
class Shape:
    """How the extender and the KGWE scheduler run in this benchmark (from the command line)."""

    cp: ControlPlane
    profiles: Path | None  # a kgwe-scoring document (--no-decide-in-filter), else the built-in profile
    all_pods: bool
    server_dir: Path | None  # --mtls: the extender's serving identity, kube-scheduler's client one
    client_dir: Path | None
    percentage: int | None

    def extender(
        self, probe_port: int, parts_dump: Path | None = None, floor: bool = False
    ) -> tuple[subprocess.Popen, int]:
        server_dir = None if floor else self.server_dir
        return start_extender(
            self.cp, probe_port, self.profiles, self.all_pods, server_dir, parts_dump, floor
        )

    def schedulers(self, extender_port: int, pids: dict, floor: bool = False) -> Schedulers:
        return Schedulers(self.cp, extender_port, pids, None if floor else self.client_dir, self.percentage)


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
        if client_dir is None:  # the sidecar: plain HTTP on loopback
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
            for attempt in range(3):  # its serving port is picked free, then bound: another process may win
                try:
                    self.kgwe.start()
                    break
                except ControlPlaneError:
                    if attempt == 2:
                        raise
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


def preemptions(pid: int) -> int:
    """Times the process's threads were taken off a CPU while runnable (nonvoluntary context switches): on
    a busy machine each one sends the thread back to cold caches, which inflates its CPU time."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        total += int(text.split("nonvoluntary_ctxt_switches:")[1].split()[0])
    return total


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
    cp: ControlPlane,
    probe_port: int,
    profiles: Path | None,
    all_pods: bool,
    server_dir: Path | None,
    parts_dump: Path | None = None,
    floor: bool = False,
) -> tuple[subprocess.Popen, int]:
    """The extender as deployed (HTTPS with a required client certificate when `server_dir` is given); its
    plain probe port serves /readyz and /metrics to this script. With `parts_dump`, through
    bench/extender_parts.py (CPU counted per part, written to that file on SIGUSR1); with `floor`,
    bench/extender_floor.py instead (the plumbing alone, plain HTTP)."""
    extra = ["--profiles", str(profiles)] if profiles else []
    extra += ["--all-pods"] if all_pods else []
    extra += ["--probe-listen", f"127.0.0.1:{probe_port}"]
    if server_dir is not None:
        extra += extender_tls_flags(server_dir)
    command = ["-m", "kgwe.cli", "extender"]
    if parts_dump is not None:
        command = [str(Path(__file__).with_name("extender_parts.py")), str(parts_dump), "--", "extender"]
    if floor:
        command, extra = [str(Path(__file__).with_name("extender_floor.py"))], extra[-2:]  # probe port only
    proc = subprocess.Popen(
        [
            sys.executable,
            *command,
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
    deadline = time.monotonic() + 180
    log = (Path(cp.workdir) / "logs" / f"extender-{proc.pid}.log").open("w")
    threading.Thread(target=lambda: log.writelines(proc.stderr), daemon=True).start()  # drain its log
    while time.monotonic() < deadline:
        try:
            if urlopen(f"http://127.0.0.1:{probe_port}/readyz").status == 200:
                return proc, port
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"extender never became ready; its log: {log.name}")


def parts_snapshot(proc: subprocess.Popen, dump: Path) -> dict:
    """The profiled extender's totals so far (bench/extender_parts.py writes them on SIGUSR1)."""
    before = dump.stat().st_mtime_ns if dump.exists() else 0
    proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if dump.exists() and dump.stat().st_mtime_ns != before:
            return orjson.loads(dump.read_bytes())
        time.sleep(0.05)
    raise SystemExit("the profiled extender did not write its totals")


def breakdown(before: dict, after: dict, cpu_ms_per_pod: float, pods: int) -> dict:
    """Per pod: CPU ms by part (and "other": the process's CPU beyond the parts), calls and watch events."""

    def diff(key: str) -> dict[str, float]:
        return {k: v - before[key].get(k, 0) for k, v in after[key].items() if v - before[key].get(k, 0)}

    parts = {k: ns / 1e6 / pods for k, ns in diff("ns").items()}
    parts["other"] = max(0.0, cpu_ms_per_pod - sum(parts.values()))
    calls = diff("calls")
    requests = calls.get("Engine._filter", 0) + calls.get("Engine._prioritize", 0)
    return {
        "extender_cpu_breakdown_ms": {
            k: round(v, 3) for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if round(v, 3)
        },
        "extender_watch_events_per_pod": {k: round(n / pods, 2) for k, n in sorted(diff("events").items())},
        "extender_served_per_pod": {
            "requests": round(requests / pods, 2),
            "connections": round(calls.get("_Conn.connection_made", 0) / pods, 3),
            "tls_handshakes": round(calls.get("TlsSession.__init__", 0) / pods, 3),
            # ranked-path lookups of a node name in a request, and requests whose node list was decoded
            # name by name instead (not answered by the ranked path)
            "ranked_probes": round(calls.get("kgwe.extender.nodenames.holds", 0) / pods, 3),
            "full_decodes": round(calls.get("Engine._parse", 0) / pods, 3),
        },
    }


def fill_through_extender(core: client.CoreV1Api, pods: int, shape: Shape) -> None:
    """Bind `pods` pods through a plain extender (not measured): the cluster the profiled phase starts on."""
    ext, port = shape.extender(free_port())
    schedulers = shape.schedulers(port, {})
    try:
        throughput(shape.cp, core, "bench-with", pods, schedulers, True)
        settle(core, "bench-with")
    finally:
        schedulers.stop()
        ext.terminate()
        ext.wait(timeout=30)


def profile_phase(
    core: client.CoreV1Api, pods: int, args: argparse.Namespace, pids: dict, shape: Shape
) -> dict:
    """One more latency phase against the extender started through bench/extender_parts.py: where its CPU
    per pod goes. The KGWE scheduler is (re)started to call that extender."""
    dump = Path(shape.cp.workdir) / "extender-parts.json"
    ext, port = shape.extender(free_port(), dump)
    pids["extender (profiled)"] = ext.pid
    pids.pop("extender", None)
    schedulers = shape.schedulers(port, pids)
    try:
        schedulers.start(True)
        time.sleep(5)
        before, preempted = parts_snapshot(ext, dump), preemptions(ext.pid)
        _, _, cpu = latency_phase(
            shape.cp, core, "bench-profiled", pods, args.rate, pids, "with", args.background_pods
        )
        after, preempted = parts_snapshot(ext, dump), preemptions(ext.pid) - preempted
    finally:
        schedulers.stop()
        ext.terminate()
        ext.wait(timeout=30)
    total = cpu.get("extender (profiled)", 0.0)
    out = {
        "extender_cpu_ms_per_pod_profiled": round(total, 2),
        "extender_preemptions_per_pod_profiled": round(preempted / pods, 1),
        **breakdown(before, after, total, pods),
    }
    print("  profiled extender, CPU ms per pod by part: " + json.dumps(out), flush=True)
    return out


def floor_phase(
    core: client.CoreV1Api, pods: int, args: argparse.Namespace, pids: dict, shape: Shape
) -> dict:
    """One more latency phase against bench/extender_floor.py (the server and the watches, no work): what a
    pod costs the plumbing under the extender at this moment."""
    ext, port = shape.extender(free_port(), floor=True)
    pids["extender (floor)"] = ext.pid
    for name in ("extender", "extender (profiled)"):
        pids.pop(name, None)
    schedulers = shape.schedulers(port, pids, floor=True)
    try:
        schedulers.start(True)
        time.sleep(5)
        preempted = preemptions(ext.pid)
        _, _, cpu = latency_phase(
            shape.cp, core, "bench-floor", pods, args.rate, pids, "with", args.background_pods
        )
        preempted = preemptions(ext.pid) - preempted
    finally:
        schedulers.stop()
        ext.terminate()
        ext.wait(timeout=30)
    return {
        "floor_cpu_ms_per_pod": round(cpu.get("extender (floor)", 0.0), 2),
        "floor_preemptions_per_pod": round(preempted / pods, 1),
    }


def floor_throughput(core: client.CoreV1Api, pods: int, pids: dict, shape: Shape) -> tuple[float, dict]:
    """The throughput phase with the KGWE scheduler calling bench/extender_floor.py (an extender doing no
    work over the same server and watches): what kube-scheduler with any extender on these parts reaches,
    the bound for ratio_with_to_without. Its pods are deleted afterwards, so the next phases run on the
    cluster they always ran on. The KGWE extender keeps running (idle but for its watches, which see these
    pods), as it does in the phase without. Returns (pods/s, CPU ms per pod by process)."""
    ext, port = shape.extender(free_port(), floor=True)
    pids["extender (floor)"] = ext.pid
    schedulers = shape.schedulers(port, pids, floor=True)
    try:
        before = cpu_breakdown(pids)
        rate = throughput(shape.cp, core, "bench-floor-throughput", pods, schedulers, True)
        cpu = report_cpu(before, cpu_breakdown(pids), pods)
    finally:
        schedulers.stop()
        ext.terminate()
        ext.wait(timeout=30)
        pids.pop("extender (floor)", None)
    print(f"with a do-nothing extender: {rate:.1f} pods/s ({pods} pods)", flush=True)
    clear(core, "bench-floor-throughput")
    return rate, cpu


def clear(core: client.CoreV1Api, ns: str, timeout_seconds: float = 300) -> None:
    """Delete every pod of `ns` at once (no grace period) and wait until they are gone."""
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0, _preload_content=False)
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        resp = core.list_namespaced_pod(ns, limit=1, _preload_content=False)
        if not orjson.loads(resp.data)["items"]:
            time.sleep(3)
            return
        time.sleep(0.5)
    raise SystemExit(f"pods of {ns} not deleted after {timeout_seconds:.0f} s")


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
        "--mtls",
        action="store_true",
        help="the standalone extender: HTTPS with client certificates (default: the sidecar, plain HTTP on "
        "loopback)",
    )
    ap.add_argument(
        "--no-profile", action="store_true", help="skip the profiled phase (extender_cpu_breakdown_ms)"
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="against bench/extender_floor.py (server and watches, no work): one more latency phase "
        "(floor_cpu_ms_per_pod, the plumbing's CPU per pod) and one more throughput phase "
        "(floor_ratio_with_to_without, the ratio any extender on these parts reaches)",
    )
    ap.add_argument(
        "--profile-only",
        action="store_true",
        help="only the profiled phase (after --pods pods bound through the extender): a quick look at "
        "extender_cpu_breakdown_ms",
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
        if args.mtls:
            server_dir, client_dir = write_mtls_dirs(Path(cp.workdir) / "extender-mtls")
        shape = Shape(
            cp, profiles, args.extender_all_pods, server_dir, client_dir, args.percentage_of_nodes_to_score
        )
        if args.profile_only:
            cpu_pids = {**cp.pids, "bench (creator)": os.getpid()}
            if pods:  # the cluster as full as the full run leaves it before its latency phases
                fill_through_extender(core, pods, shape)
            profiled = profile_phase(core, latency_pods, args, cpu_pids, shape)
            if args.floor:
                settle(core, "bench-profiled")
                profiled |= floor_phase(core, latency_pods, args, cpu_pids, shape)
            print(json.dumps({"nodes": nodes, "tls": args.mtls, **profiled}))
            return 0
        probe = free_port()
        ext, port = shape.extender(probe)
        pids = {**cp.pids, "extender": ext.pid, "bench (creator)": os.getpid()}
        schedulers = shape.schedulers(port, pids)

        def run_scheduler(with_extender: bool) -> None:
            schedulers.start(with_extender)
            time.sleep(5)  # past its start-up: caches filled from the initial lists, first collections done

        before = cpu_breakdown(pids)
        without = throughput(cp, core, "bench-without", pods, schedulers, False)
        after = cpu_breakdown(pids)
        print(f"without extender: {without:.1f} pods/s ({pods} pods)", flush=True)
        tp_without = report_cpu(before, after, pods)
        settle(core, "bench-without")
        floor_rate: float | None = None
        floor_cpu: dict[str, float] = {}
        if args.floor:  # between the two, on the cluster "with" finds: the bound for its ratio
            floor_rate, floor_cpu = floor_throughput(core, pods, dict(pids), shape)
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
        calls0, preempted0 = extender_calls(probe), preemptions(ext.pid)
        lat, lat_sent, cpu_with = latency_phase(
            cp, core, "bench-latency", latency_pods, args.rate, pids, "with", args.background_pods
        )
        calls1, preempted = extender_calls(probe), (preemptions(ext.pid) - preempted0) / latency_pods
        print(
            f"  extender preempted {preempted:.1f} times per pod; calls per pod: "
            + ", ".join(
                f"{v} {(calls1.get(v, 0) - calls0.get(v, 0)) / latency_pods:.2f}"
                for v in ("filter", "prioritize")
            ),
            flush=True,
        )
        p50, p99, p99_sent = pct(lat, 50), pct(lat, 99), pct(lat_sent, 99)
        settle(core, "bench-latency")
        ext.terminate()
        ext.wait(timeout=30)
        ext = None
        schedulers.stop()
        profiled: dict = {}
        if not args.no_profile:
            profiled |= profile_phase(core, latency_pods, args, pids, shape)
            settle(core, "bench-profiled")
        if args.floor:
            profiled |= floor_phase(core, latency_pods, args, pids, shape)
    finally:
        if schedulers is not None:
            schedulers.stop()
        if ext is not None:
            ext.terminate()
            ext.wait(timeout=10)
        cp.stop(remove_workdir=not os.environ.get("KGWE_BENCH_KEEP"))
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
                "extender_preemptions_per_pod": round(preempted, 1),
                "apiserver_cpu_ms_per_pod_with": round(api_with, 2),
                "apiserver_cpu_ms_per_pod_without": round(api_without, 2),
                "apiserver_cpu_ratio_with_to_without": round(api_with / api_without, 2)
                if api_without
                else None,
                "ratio_with_to_without": round(with_ext / without, 2) if without else None,
                "tls": args.mtls,
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
                **(
                    {
                        "floor_pods_per_second": round(floor_rate, 1),
                        "floor_ratio_with_to_without": round(floor_rate / without, 2) if without else None,
                        "with_to_floor": round(with_ext / floor_rate, 2),
                        "floor_cpu_ms_per_pod_throughput": round(floor_cpu.get("extender (floor)", 0.0), 2),
                        "floor_scheduler_cpu_ms_per_pod_throughput": round(
                            floor_cpu.get("kgwe-scheduler", 0.0), 2
                        ),
                    }
                    if floor_rate
                    else {}
                ),
                **profiled,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
