"""Benchmark of the GitOps reconciler on the real local control plane with simulated GPU nodes.

    .venv/bin/python bench/reconcile.py [--quick] [--nodes N]

On N DGX-H100 kwok nodes (default 1,250 × 8 GPUs): a fleet-wide MIG policy change (CPU time of the reconcile
that renders, diffs and applies it, and its API writes), a no-op reconcile (writes and wall time), and
commit → applied latency through the signed webhook (excluding MIG manager delays: the figure stops when the
PolicyRepository reports the revision applied and the nodes relabelled).

Last line: JSON with fleet_change_cpu_seconds, fleet_change_writes, noop_writes, noop_seconds,
noop_cpu_seconds, webhook_to_applied_seconds.
"""

from __future__ import annotations

import argparse
import cProfile
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
from pathlib import Path

from kubernetes import client

from kgwe.cluster.client import ensure_namespace, list_items
from kgwe.cluster.crds import install_crds
from kgwe.cluster.names import MIG_STATE_LABEL
from kgwe.gitops.gitcmd import LOOPBACK_NETWORKS, GitAccess
from kgwe.gitops.webhook import sign
from kgwe.localcluster import gpunodes
from kgwe.localcluster.controlplane import ControlPlane, find_binaries
from kgwe.localcluster.gitserver import GitHttpsServer
from kgwe.reconcile.controller import Controller
from kgwe.reconcile.repository import GROUP, PLURAL, VERSION, RepositoryReconciler

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


def mig_manager_reports_success(api: client.ApiClient, names: list[str]) -> None:
    """What the MIG manager would end with on every relabelled node (its delays are not measured)."""
    core = client.CoreV1Api(api)
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(
            pool.map(
                lambda n: core.patch_node(n, {"metadata": {"labels": {MIG_STATE_LABEL: "success"}}}), names
            )
        )


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


def writes(rec: RepositoryReconciler) -> float:
    return rec.metrics.writes.labels(POOL)._value.get() + rec.status_writes + rec.recorder.writes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 nodes instead of 1,250")
    parser.add_argument("--nodes", type=int)
    parser.add_argument(
        "--profile", action="store_true", help="print where the no-op and the fleet-wide change spend time"
    )
    args = parser.parse_args()
    count = args.nodes or (100 if args.quick else 1250)

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

        access = GitAccess(allowed_networks=LOOPBACK_NETWORKS)  # the Git server listens on loopback
        rec = RepositoryReconciler(api, NS, POOL, cache_dir=tmp / "cache", git_access=access)
        t0 = time.monotonic()
        first = rec.reconcile()
        print(f"first reconcile: {first.phase}, {time.monotonic() - t0:.2f}s")
        mig_manager_reports_success(api, names)
        settled = rec.reconcile()
        print(f"after MIG success: {settled.phase}")

        profiler = cProfile.Profile() if args.profile else None
        w0, t0, c0, plans = writes(rec), time.perf_counter(), time.process_time(), rec.plans_computed
        if profiler:
            profiler.enable()
        noop = rec.reconcile()
        noop_seconds = time.perf_counter() - t0
        noop_cpu = time.process_time() - c0
        replanned = rec.plans_computed - plans
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        noop_writes = writes(rec) - w0
        print(
            f"no-op reconcile: {noop.phase}, {noop_seconds:.2f}s wall, {noop_cpu:.2f}s CPU, "
            f"{noop_writes:.0f} writes, planned again: {'yes' if replanned else 'no'}"
        )

        commit(work, "3g.40gb")
        profiler = cProfile.Profile() if args.profile else None
        w0, c0, t0 = writes(rec), time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        change = rec.reconcile()
        fleet_cpu = time.process_time() - c0
        fleet_wall = time.perf_counter() - t0
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
        fleet_writes = writes(rec) - w0
        relabels = sum(1 for a in rec.last_plan.actions if a.kind == "relabel")
        print(
            f"fleet-wide change: {change.phase}, cpu {fleet_cpu:.2f}s, wall {fleet_wall:.2f}s, "
            f"{fleet_writes:.0f} writes ({relabels} node relabels)"
        )
        mig_manager_reports_success(api, names)
        rec.reconcile()

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
        t0 = time.perf_counter()
        urllib.request.urlopen(req, timeout=10).read()
        want = f"main@sha1:{sha}"
        while time.monotonic() < deadline:
            status = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, POOL).get("status") or {}
            if status.get("lastAppliedRevision") == want:
                break
            time.sleep(0.02)
        webhook_seconds = time.perf_counter() - t0
        print(f"commit → applied through the webhook: {webhook_seconds:.2f}s")
        stop.set()
        thread.join(timeout=30)

    result = {
        "fleet_change_cpu_seconds": round(fleet_cpu, 3),
        "fleet_change_writes": int(fleet_writes),
        "noop_writes": int(noop_writes),
        "noop_seconds": round(noop_seconds, 3),
        "noop_cpu_seconds": round(noop_cpu, 3),
        "webhook_to_applied_seconds": round(webhook_seconds, 3),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
