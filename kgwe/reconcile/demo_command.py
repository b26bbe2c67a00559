"""The KGWE demo: the real main job on a laptop.

Starts a local control plane (etcd, kube-apiserver, kube-scheduler, kwok) with simulated GPU nodes built
from sample-repo's inventory and a MIG manager stand-in, puts sample-repo in a local Git repository, runs
the controller against it and shows the MIG layouts rolling out pool by pool; then commits a policy change,
sends the signed webhook, and shows that change rolling through.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from kgwe.errors import KgweError

NS = "kgwe-system"
REPO = "gpu-policy"
SECRET = b"demo-webhook-secret"
MACHINE_FOR_TOPOLOGY = {
    "DGX-H100": "DGX-H100",
    "HGX-H100": "DGX-H100",
    "DGX-A100": "DGX-A100",
    "L40S-8-PCIE": "L40S-8-PCIE",
    "DGX-1-V100": "DGX-1-V100",
}
# The demo's commits are made by a pretend platform engineer, whatever the user's own git config says.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Platform Team",
    "GIT_AUTHOR_EMAIL": "platform@example.com",
    "GIT_COMMITTER_NAME": "Platform Team",
    "GIT_COMMITTER_EMAIL": "platform@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mig-delay", type=float, default=1.0, help="seconds the MIG manager takes per node")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="give up waiting for a rollout after this"
    )


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_IDENTITY}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise KgweError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _say(text: str) -> None:
    print(text, flush=True)


def _show(api: Any, pools: dict[str, list[str]], status: dict) -> str:
    from kubernetes import client

    core = client.CoreV1Api(api)
    lines = []
    for pool, names in sorted(pools.items()):
        cells = []
        for name in names:
            labels = core.read_node(name).metadata.labels or {}
            if "nvidia.com/mig.config" not in labels:  # no MIGStrategy selects it: KGWE leaves it alone
                cells.append(f"{name} (no MIG policy)")
                continue
            config = labels["nvidia.com/mig.config"].removeprefix("kgwe-")
            state = labels.get("nvidia.com/mig.config.state", "")
            mark = {"success": "✓", "pending": "⟳", "failed": "✗"}.get(state, "…")
            cells.append(f"{name}={config}{mark}")
        lines.append(f"  {pool}:\n    " + "  ".join(cells))
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    lines.append(
        f"  Ready={ready.get('status', '?')} ({ready.get('reason', '')}): {ready.get('message', '')[:140]}"
    )
    return "\n".join(lines)


def _wait_ready(api: Any, pools: dict[str, list[str]], revision: str, timeout: float) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        obj = custom.get_namespaced_custom_object("kgwe.nvidia.io", "v1", NS, "policyrepositories", REPO)
        status = obj.get("status") or {}
        view = _show(api, pools, status)
        if view != last:
            _say(f"[{time.strftime('%H:%M:%S')}]\n{view}")
            last = view
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        if status.get("lastAppliedRevision", "").endswith(revision) and ready.get("status") == "True":
            return
        if ready.get("reason") in ("ValidationFailed", "RolloutStalled"):
            raise KgweError(f"rollout stopped: {ready.get('message')}")
        time.sleep(1.0)
    raise KgweError(f"revision {revision[:12]} not rolled out within {timeout:.0f}s")


def run(args: argparse.Namespace) -> int:
    from kubernetes import client

    from kgwe.cluster.client import ensure_namespace
    from kgwe.gitops.webhook import sign
    from kgwe.reconcile.controller import Controller
    from kgwe.resources import deploy_dir, sample_repo_dir
    from kgwe.testing import gpunodes
    from kgwe.testing.controlplane import ControlPlane, find_binaries
    from kgwe.testing.migmanager import MigManagerStandIn

    inventory = next(
        d
        for p in sorted((sample_repo_dir() / "inventory").glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if d and d.get("kind") == "GPUInventory"
    )
    budgets = [
        d
        for p in sorted((sample_repo_dir() / "budgets").glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if d and d.get("kind") == "GPUBudget"
    ]
    _say("KGWE demo: starting a local control plane (etcd, kube-apiserver, kube-scheduler, kwok) ...")
    with tempfile.TemporaryDirectory(prefix="kgwe-demo-") as tmp_name, ControlPlane(find_binaries()) as cp:
        tmp = Path(tmp_name)
        api = cp.new_api_client()
        _say(f"  API server {cp.server_url}; kubeconfig {cp.kubeconfig_path}")
        ext = client.ApiextensionsV1Api(api)
        for path in sorted((deploy_dir() / "crds").glob("*.yaml")):
            for crd in yaml.safe_load_all(path.read_text()):
                ext.create_custom_resource_definition(crd)
        for ns in {NS, "gpu-operator", *(n for b in budgets for n in b["spec"].get("namespaces", []))}:
            ensure_namespace(api, ns)

        pools: dict[str, list[str]] = {}
        for node in inventory["spec"]["nodes"]:
            machine = MACHINE_FOR_TOPOLOGY.get(node.get("topology", ""), "DGX-H100")
            labels = {k: v for k, v in node["labels"].items() if not k.startswith("nvidia.com/")}
            gpunodes.create_gpu_node(api, node["name"], machine, labels=labels)
            pools.setdefault(labels.get("kgwe.nvidia.io/pool", "other"), []).append(node["name"])
        _say(
            f"  {len(inventory['spec']['nodes'])} simulated GPU nodes from sample-repo's inventory: "
            + ", ".join(f"{p} ({len(n)})" for p, n in sorted(pools.items()))
        )
        pools = {p: n for p, n in pools.items() if p != "other"}
        # wait for the apiserver to serve the CRD before anything uses it
        custom = client.CustomObjectsApi(api)
        for _ in range(100):
            try:
                custom.list_namespaced_custom_object("kgwe.nvidia.io", "v1", NS, "policyrepositories")
                break
            except client.exceptions.ApiException:
                time.sleep(0.1)

        bare, work = tmp / "gpu-policy.git", tmp / "gpu-policy"
        _git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
        shutil.copytree(sample_repo_dir(), work / "clusters" / "prod")
        _git(work, "init", "-q", "-b", "main")
        _git(work, "add", "-A")
        _git(work, "commit", "-qm", "GPU policy for prod")
        _git(work, "remote", "add", "origin", str(bare))
        _git(work, "push", "-q", "origin", "main")
        first = _git(work, "rev-parse", "HEAD")
        _say(f"  policy repository {bare} (sample-repo at clusters/prod), commit {first[:12]}")

        with MigManagerStandIn(
            api,
            delay_seconds=args.mig_delay,
            config_namespace="gpu-operator",
            config_map="kgwe-mig-parted-config",
        ):
            controller = Controller(
                api,
                NS,
                cache_dir=tmp / "cache",
                webhook_secret=SECRET,
                listen=("127.0.0.1", 0),
                lease_duration_seconds=6,
                renew_deadline_seconds=4,
                retry_period_seconds=1,
            )
            stop = threading.Event()
            thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
            thread.start()
            custom.create_namespaced_custom_object(
                "kgwe.nvidia.io",
                "v1",
                NS,
                "policyrepositories",
                {
                    "apiVersion": "kgwe.nvidia.io/v1",
                    "kind": "PolicyRepository",
                    "metadata": {"name": REPO},
                    "spec": {
                        "url": str(bare),
                        "ref": {"branch": "main"},
                        "path": "clusters/prod",
                        "interval": "5s",
                        "reports": {"path": "reports/prod"},
                    },
                },
            )
            _say(
                f"\n== controller running (webhook and metrics on 127.0.0.1:{controller.server.port}); "
                "rolling out the initial layouts =="
            )
            _say("   node=<nvidia.com/mig.config>  ✓ MIG manager reports success  ⟳ pending  ✗ failed")
            try:
                _wait_ready(api, pools, first, args.timeout)
                _say("\n== a platform engineer changes the inference pool's MIG mix (commit + webhook) ==")
                _git(work, "pull", "-q", "--rebase", "origin", "main")  # the bot committed reports/
                path = work / "clusters/prod/mig/inference-h100.yaml"
                text = path.read_text()
                path.write_text(
                    text.replace("1g.10gb: 70%", "1g.10gb: 40%").replace("2g.20gb: 20%", "2g.20gb: 50%")
                )
                _git(work, "commit", "-qam", "inference-h100: more 2g.20gb for the new 13B model")
                _git(work, "push", "-q", "origin", "main")
                second = _git(work, "rev-parse", "HEAD")
                body = json.dumps(
                    {
                        "ref": "refs/heads/main",
                        "after": second,
                        "commits": [{"modified": ["clusters/prod/mig/inference-h100.yaml"]}],
                        "repository": {"clone_url": str(bare)},
                    }
                ).encode()
                req = urllib.request.Request(
                    f"http://127.0.0.1:{controller.server.port}/hooks/git",
                    data=body,
                    method="POST",
                    headers={
                        "Content-Type": "application/json",
                        "X-GitHub-Event": "push",
                        "X-Hub-Signature-256": sign(SECRET, body),
                    },
                )
                with urllib.request.urlopen(req, timeout=10) as resp:
                    _say(f"  webhook: HTTP {resp.status} {resp.read().decode()}")
                _wait_ready(api, pools, second, args.timeout)
                log = _git(bare, "log", "--format=%h %an: %s", "-5", "main")
                _say(
                    "\n== done: the cluster matches the repository ==\nrecent commits (the bot's inventory "
                    f"snapshot under reports/ feeds `kgwe plan` in CI):\n{log}"
                )
            finally:
                stop.set()
                thread.join(timeout=20)
    return 0
