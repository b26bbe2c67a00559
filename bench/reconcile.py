"""Benchmark of the GitOps reconciler on the real local control plane with simulated GPU nodes.

    .venv/bin/python bench/reconcile.py [--quick] [--nodes N]

On N DGX-H100 kwok nodes (default 1,250 × 8 GPUs), the reconciler as the controller runs it (its GPU
nodes kept by the node cache's watch): a fleet-wide MIG policy change (CPU and wall time of the reconcile
that renders, diffs and applies it, and its API writes), a no-op reconcile (writes and wall time), and
commit → applied latency through the signed webhook (excluding MIG manager delays: the figure stops when the
PolicyRepository reports the revision applied and the nodes relabelled), with the time to its first write
(the mig-parted ConfigMap, seen by a watch) and where the webhook's pass spent its time (its trace spans).

The floor, measured in the same run: the same N node patches (the relabel's body) sent by a minimal client —
bodies serialised beforehand, urllib3 on the API client's certificates, no response decoding — with 8 and
with 32 connections at once, the faster counting. The fleet-wide change's wall time over it is
fleet_change_ratio_to_floor.

Last line: JSON with fleet_change_cpu_seconds (and _gc_seconds: the garbage collector's part of it),
fleet_change_seconds, fleet_change_writes, floor_seconds, fleet_change_ratio_to_floor, noop_writes,
noop_seconds, noop_cpu_seconds, noop_gc_seconds, webhook_to_first_write_seconds, webhook_to_applied_seconds,
webhook_pass_seconds and fleet_change_pass_seconds (per step).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import orjson
from kubernetes import client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kgwe.cluster.client import ensure_namespace, list_items
from kgwe.cluster.crds import install_crds
from kgwe.cluster.nodecache import NodeCache
from kgwe.gitops.gitcmd import LOOPBACK_NETWORKS, GitAccess
from kgwe.gitops.webhook import sign
from kgwe.localcluster import gpunodes
from kgwe.localcluster.controlplane import ControlPlane, find_binaries
from kgwe.localcluster.gitserver import GitHttpsServer
from kgwe.observability import tracing
from kgwe.reconcile.controller import Controller
from kgwe.reconcile.repository import GROUP, PLURAL, VERSION, RepositoryReconciler
from kgwe.render.render import RenderOptions
from kgwe.runtime.kube import MERGE_PATCH
from kgwe.timestamps import format_rfc3339
from kgwe.vocab import (
    ACKNOWLEDGED_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    REQUESTED_AT_ANNOTATION,
    RETRY_ANNOTATION,
    ROLLOUT_REVISION_ANNOTATION,
)

NS = "kgwe-system"
POOL = "bench"
ENV = {
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@x",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@x",
    "HOME": "/tmp",
    "PATH": "/usr/bin:/bin",
}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def strategy(profile: str) -> str:
    return (
        f"apiVersion: kgwe.nvidia.io/v1\nkind: MIGStrategy\nmetadata: {{name: {POOL}}}\nspec:\n"
        f"  nodeSelector: {{kgwe.nvidia.io/pool: {POOL}}}\n  partitionStrategy:\n"
        f"    preferredProfiles:\n      - {profile}: 100%\n"
        f"  rollout: {{maxUnavailable: 100%, drain: false, pendingTimeout: 1h}}\n"
    )


def commit(work: Path, profile: str) -> str:
    (work / "policy").mkdir(exist_ok=True)
    (work / "policy" / "mig.yaml").write_text(strategy(profile))
    git(work, "add", "-A")
    git(work, "commit", "-qm", f"pool {POOL}: {profile}")
    git(work, "push", "-q", "origin", "HEAD:main")
    return git(work, "rev-parse", "HEAD")


def mig_manager_reports_success(api: client.ApiClient, names: list[str], cache: NodeCache) -> None:
    """What the MIG manager would end with on every relabelled node (its delays are not measured); the node
    cache is told to expect these writes, so the next reconcile plans on all of them, as a list would."""
    core = client.CoreV1Api(api)

    def report(name: str) -> None:
        node = core.patch_node(name, {"metadata": {"labels": {MIG_STATE_LABEL: "success"}}})
        cache.expect(name, node.metadata.resource_version)

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(report, names))


def wait_until_settled(api: client.ApiClient, count: int, timeout_s: float = 300.0) -> float:
    """Seconds until every fresh node carries the labels the cluster adds after creation (kubernetes.io
    beta os/arch labels; on a loaded machine 1,250 nodes take minutes): a no-op is measured on a settled
    cluster, not one whose nodes still change under it."""
    core = client.CoreV1Api(api)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        nodes = list_items(core.list_node, label_selector=f"kgwe.nvidia.io/pool={POOL}")
        if sum(1 for n in nodes if "beta.kubernetes.io/os" in n["metadata"].get("labels", {})) >= count:
            break
        time.sleep(2)
    return time.monotonic() - t0


def floor_seconds(api: client.ApiClient, names: list[str], config: str, workers: int) -> float:
    """Wall seconds for a minimal client to send every node the relabel's patch, `workers` at once: bodies
    serialised beforehand, urllib3 on the API client's certificates, answers drained, not decoded."""
    import urllib3

    cfg = api.configuration
    pool = urllib3.PoolManager(
        num_pools=4,
        maxsize=workers,
        cert_reqs="CERT_REQUIRED",
        ca_certs=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
    )
    stamp = format_rfc3339(datetime.now(UTC))
    body = orjson.dumps(
        {
            "metadata": {
                "labels": {MIG_CONFIG_LABEL: config, MIG_STATE_LABEL: None},
                "annotations": {
                    REQUESTED_AT_ANNOTATION: stamp,
                    ROLLOUT_REVISION_ANNOTATION: f"floor-{workers}",
                    RETRY_ANNOTATION: None,
                    ACKNOWLEDGED_ANNOTATION: None,
                },
            }
        }
    )
    headers = {"Content-Type": MERGE_PATCH, "Accept": "application/json"}
    urls = [f"{cfg.host}/api/v1/nodes/{n}?fieldManager=kgwe-controller" for n in names]

    def patch(url: str) -> None:
        response = pool.request("PATCH", url, body=body, headers=headers, preload_content=False)
        response.drain_conn()
        response.release_conn()
        assert response.status == 200, response.status

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as threads:
        list(threads.map(patch, urls))
    return time.perf_counter() - t0


def first_write_after(
    api: client.ApiClient, started: threading.Event, seen: list[float], stop: threading.Event
):
    """When the mig-parted ConfigMap first changes after `started` is set (the webhook's first write)."""
    from kubernetes import watch

    options = RenderOptions()
    core = client.CoreV1Api(api)
    version = core.read_namespaced_config_map(options.mig_config_name, options.mig_namespace).metadata
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_config_map,
        options.mig_namespace,
        field_selector=f"metadata.name={options.mig_config_name}",
        resource_version=version.resource_version,
        timeout_seconds=300,
    ):
        if event["type"] == "MODIFIED" and started.is_set():
            seen.append(time.perf_counter())
            w.stop()
        if stop.is_set():
            w.stop()


class GcClock:
    """CPU seconds the cyclic garbage collector has spent since the bench started (all generations)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started


def writes(rec: RepositoryReconciler) -> float:
    return rec.metrics.writes.labels(POOL)._value.get() + rec.status_writes + rec.recorder.writes


def pass_steps(spans: InMemorySpanExporter, posted_ns: int) -> dict[str, float]:
    """Seconds from the push to the last traced reconcile pass ("queued"), of the pass, and of each of its
    steps (its spans)."""
    finished = spans.get_finished_spans()
    roots = [s for s in finished if s.name == "kgwe.reconcile"]
    if not roots:
        return {}
    root = roots[-1]
    steps = {"queued": (root.start_time - posted_ns) / 1e9, "pass": (root.end_time - root.start_time) / 1e9}
    for span in finished:
        if span.context.trace_id == root.context.trace_id and span is not root:
            name = span.name.removeprefix("kgwe.reconcile.")
            steps[name] = steps.get(name, 0.0) + (span.end_time - span.start_time) / 1e9
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 nodes instead of 1,250")
    parser.add_argument("--nodes", type=int)
    parser.add_argument(
        "--profile", action="store_true", help="print where the no-op and the fleet-wide change spend time"
    )
    args = parser.parse_args()
    count = args.nodes or (100 if args.quick else 1250)
    gc_clock = GcClock()

    with tempfile.TemporaryDirectory(prefix="kgwe-bench-") as tmp_name, ControlPlane(find_binaries()) as cp:
        tmp = Path(tmp_name)
        api = cp.new_api_client(pool_size=32)
        install_crds(api)  # deploy/crds, waits until established
        for ns in (NS, "gpu-operator"):
            ensure_namespace(api, ns)
        names = [f"bench-h100-{i:04d}" for i in range(count)]
        t0 = time.monotonic()
        gpunodes.create_gpu_nodes(api, "DGX-H100", names, workers=16, labels={"kgwe.nvidia.io/pool": POOL})
        print(f"created {count} DGX-H100 kwok nodes ({count * 8} GPUs) in {time.monotonic() - t0:.1f}s")
        print(f"nodes settled (os/arch labels on all) after {wait_until_settled(api, count):.1f}s more")

        bare, work = tmp / "policy.git", tmp / "work"
        git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
        git(tmp, "clone", "-q", str(bare), str(work))
        git(work, "checkout", "-q", "-b", "main")
        commit(work, "1g.10gb")
        # PolicyRepository URLs must be https:// or ssh://: serve the bare repository over HTTPS on loopback.
        git_server = GitHttpsServer(tmp).start()
        os.environ["GIT_SSL_CAINFO"] = git_server.ca_file
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            {
                "apiVersion": "kgwe.nvidia.io/v1",
                "kind": "PolicyRepository",
                "metadata": {"name": POOL},
                "spec": {
                    "url": git_server.url(bare.name),
                    "ref": {"branch": "main"},
                    "path": "policy",
                    "interval": "1h",
                },
            },
        )

        stop_cache = threading.Event()
        node_cache = NodeCache(api).start(stop_cache)  # as the controller runs it
        access = GitAccess(allowed_networks=LOOPBACK_NETWORKS)  # the Git server listens on loopback
        rec = RepositoryReconciler(
            api, NS, POOL, cache_dir=tmp / "cache", node_cache=node_cache, git_access=access
        )
        t0 = time.monotonic()
        first = rec.reconcile()
        print(f"first reconcile: {first.phase}, {time.monotonic() - t0:.2f}s")
        mig_manager_reports_success(api, names, node_cache)
        settled = rec.reconcile()
        print(f"after MIG success: {settled.phase}")

        profiler = cProfile.Profile() if args.profile else None
        noop_spans = InMemorySpanExporter()
        tracing.configure("kgwe-bench", exporter=noop_spans)
        w0, t0, c0, plans = writes(rec), time.perf_counter(), time.process_time(), rec.plans_computed
        g0 = gc_clock.seconds
        if profiler:
            profiler.enable()
        noop = rec.reconcile()
        noop_seconds = time.perf_counter() - t0
        noop_cpu = time.process_time() - c0
        noop_gc = gc_clock.seconds - g0
        tracing.disable()
        noop_steps = pass_steps(noop_spans, time.time_ns())
        replanned = rec.plans_computed - plans
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        noop_writes = writes(rec) - w0
        print(
            f"no-op reconcile: {noop.phase}, {noop_seconds:.2f}s wall, {noop_cpu:.2f}s CPU "
            f"({noop_gc:.2f}s of it garbage collection), "
            f"{noop_writes:.0f} writes, planned again: {'yes' if replanned else 'no'}; "
            + ", ".join(f"{k} {v:.3f}s" for k, v in noop_steps.items() if k != "queued")
        )

        commit(work, "3g.40gb")
        profiler = cProfile.Profile() if args.profile else None
        change_spans = InMemorySpanExporter()
        tracing.configure("kgwe-bench", exporter=change_spans)
        w0, c0, t0, g0 = writes(rec), time.process_time(), time.perf_counter(), gc_clock.seconds
        if profiler:
            profiler.enable()
        change = rec.reconcile()
        fleet_cpu = time.process_time() - c0
        fleet_gc = gc_clock.seconds - g0
        fleet_wall = time.perf_counter() - t0
        tracing.disable()
        change_steps = pass_steps(change_spans, time.time_ns())
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
        fleet_writes = writes(rec) - w0
        relabels = sum(1 for a in rec.last_plan.actions if a.kind == "relabel")
        print(
            f"fleet-wide change: {change.phase}, cpu {fleet_cpu:.2f}s ({fleet_gc:.2f}s of it garbage "
            f"collection), wall {fleet_wall:.2f}s, "
            f"{fleet_writes:.0f} writes ({relabels} node relabels); "
            + ", ".join(f"{k} {v:.3f}s" for k, v in change_steps.items() if k != "queued")
        )
        selected = client.CoreV1Api(api).read_node(names[0]).metadata.labels[MIG_CONFIG_LABEL]
        floors = {n: floor_seconds(api, names, selected, n) for n in (8, 32)}
        floor = min(floors.values())
        print(
            f"floor: {count} node patches by a minimal client in {floor:.2f}s "
            f"({', '.join(f'{n} at once: {s:.2f}s' for n, s in floors.items())}); "
            f"the fleet-wide change took {fleet_wall / floor:.2f}× that"
        )
        mig_manager_reports_success(api, names, node_cache)
        rec.reconcile()

        stop_cache.set()
        secret = b"bench-secret"
        controller = Controller(
            api,
            NS,
            cache_dir=tmp / "ctl",
            webhook_secret=secret,
            listen=("127.0.0.1", 0),
            leader_election=False,
            git_access=access,
        )
        stop = threading.Event()
        thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
        thread.start()
        custom = client.CustomObjectsApi(api)
        deadline = time.monotonic() + 300
        while controller.reconciles == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        posted, first_seen, stop_watch = threading.Event(), [], threading.Event()
        watcher = threading.Thread(
            target=first_write_after, args=(api, posted, first_seen, stop_watch), daemon=True
        )
        watcher.start()
        spans = InMemorySpanExporter()
        tracing.configure("kgwe-bench", exporter=spans)
        time.sleep(0.5)  # the watch is established
        sha = commit(work, "2g.20gb")
        body = json.dumps(
            {
                "ref": "refs/heads/main",
                "after": sha,
                "commits": [{"modified": ["policy/mig.yaml"]}],
                "repository": {"clone_url": git_server.url(bare.name)},
            }
        )
        req = urllib.request.Request(
            f"http://127.0.0.1:{controller.server.port}/hooks/git",
            data=body.encode(),
            method="POST",
            headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": "push",
                "X-Hub-Signature-256": sign(secret, body.encode()),
            },
        )
        posted.set()
        t0, t0_ns = time.perf_counter(), time.time_ns()
        urllib.request.urlopen(req, timeout=10).read()
        want = f"main@sha1:{sha}"
        while time.monotonic() < deadline:
            status = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, POOL).get("status") or {}
            if status.get("lastAppliedRevision") == want:
                break
            time.sleep(0.02)
        webhook_seconds = time.perf_counter() - t0
        stop_watch.set()
        watcher.join(timeout=30)
        first_write = first_seen[0] - t0 if first_seen else float("nan")
        tracing.disable()
        steps = pass_steps(spans, t0_ns)
        print(
            f"commit → applied through the webhook: {webhook_seconds:.2f}s, first write after "
            f"{first_write:.2f}s; its pass: " + ", ".join(f"{k} {v:.2f}s" for k, v in steps.items())
        )
        stop.set()
        thread.join(timeout=30)

    result = {
        "fleet_change_cpu_seconds": round(fleet_cpu, 3),
        "fleet_change_gc_seconds": round(fleet_gc, 3),
        "fleet_change_seconds": round(fleet_wall, 3),
        "fleet_change_writes": int(fleet_writes),
        "floor_seconds": round(floor, 3),
        "fleet_change_ratio_to_floor": round(fleet_wall / floor, 3),
        "noop_writes": int(noop_writes),
        "noop_seconds": round(noop_seconds, 3),
        "noop_cpu_seconds": round(noop_cpu, 3),
        "noop_gc_seconds": round(noop_gc, 3),
        "webhook_to_first_write_seconds": round(first_write, 3),
        "webhook_to_applied_seconds": round(webhook_seconds, 3),
        "webhook_pass_seconds": {k: round(v, 3) for k, v in steps.items()},
        "fleet_change_pass_seconds": {k: round(v, 3) for k, v in change_steps.items() if k != "queued"},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
