"""The KGWE demo: the real main job on a laptop.

Starts a local control plane (etcd, kube-apiserver, kube-scheduler, kwok) with simulated GPU nodes built from
sample-repo's inventory, MIG manager and device-plugin stand-ins, puts sample-repo in a local Git repository,
runs the controller against it and shows the MIG layouts (and the L40S pool's time-slicing) rolling out pool
by pool; then runs GPU jobs (GPUWorkloads: the 8-GPU llm-training and the llm-training-job of
docs/examples/gpuworkloads as written, the latter without a pod template, and an inference service on MIG
slices) through kube-scheduler with KGWE's rendered configuration and extender, printing where each pod
landed; the controller's cost duties meter them into a SQLite cost store and commit a chargeback report
(GPU-hours by team) to the policy repository; then pods ask for a MIG profile no layout offers and the
controller rebalances the pool for them; then commits a policy change, sends the signed webhook, and shows
that change rolling through.
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
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kgwe.errors import KgweError
from kgwe.runtime.conditions import READY, find, is_true
from kgwe.vocab import (
    API_GROUP,
    API_VERSION,
    CONFIG_NAME_PREFIX,
    CONTROLLER_NAME,
    CRD_VERSION,
    DEVICE_PLUGIN_CONFIG_LABEL,
    EXTENDER_NAME,
    GPU_OPERATOR_NAMESPACE,
    GPU_PRODUCT_LABEL,
    GPU_REPLICAS_LABEL,
    GPU_WORKLOAD_PLURAL,
    KGWE_NAMESPACE,
    MIG_CONFIG_LABEL,
    MIG_PARTED_CONFIGMAP,
    MIG_STATE_LABEL,
    POLICY_REPOSITORY_PLURAL,
    POOL_LABEL,
    SCHEDULER_CONFIG_KEY,
    SCHEDULER_NAME,
    WORKLOAD_LABEL,
    mig_resource,
)

if TYPE_CHECKING:  # imported where used: `kgwe demo --help` loads none of them
    from kubernetes import client

    from kgwe.localcluster.controlplane import ControlPlane
    from kgwe.localcluster.prometheus import PrometheusServer
    from kgwe.reconcile.controller import Controller

NS = KGWE_NAMESPACE
REPO = "gpu-policy"
SECRET = b"demo-webhook-secret"
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
    parser.add_argument(
        "--keep-repo",
        metavar="DIR",
        type=Path,
        help="leave the demo's policy repository, with everything the controller committed (cost reports, "
        "inventory snapshot), as a Git checkout in DIR (which must not exist or be empty)",
    )
    parser.add_argument(
        "--prometheus",
        action="store_true",
        help="also run a real Prometheus scraping the controller and the extender; at the end check that "
        "every dashboard panel has data and provoke alerts (prints one JSON line)",
    )


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_IDENTITY}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise KgweError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _say(text: str) -> None:
    print(text, flush=True)


def _show(api: client.ApiClient, pools: dict[str, list[str]], status: dict[str, Any]) -> str:
    from kubernetes import client

    core = client.CoreV1Api(api)
    lines = []
    for pool, names in sorted(pools.items()):
        cells = []
        for name in names:
            labels = core.read_node(name).metadata.labels or {}
            if DEVICE_PLUGIN_CONFIG_LABEL in labels:  # a GPUSharingStrategy shares its GPUs
                replicas = labels.get(GPU_REPLICAS_LABEL, "1")
                config = labels[DEVICE_PLUGIN_CONFIG_LABEL].removeprefix(CONFIG_NAME_PREFIX)
                cells.append(f"{name}={config} ×{replicas}")
                continue
            if MIG_CONFIG_LABEL not in labels:  # no MIGStrategy selects it: KGWE leaves it alone
                cells.append(f"{name} (no MIG policy)")
                continue
            config = labels[MIG_CONFIG_LABEL].removeprefix(CONFIG_NAME_PREFIX)
            state = labels.get(MIG_STATE_LABEL, "")
            mark = {"success": "✓", "pending": "⟳", "failed": "✗"}.get(state, "…")
            cells.append(f"{name}={config}{mark}")
        lines.append(f"  {pool}:\n    " + "  ".join(cells))
    ready = find(status.get("conditions"), READY) or {}
    lines.append(
        f"  Ready={ready.get('status', '?')} ({ready.get('reason', '')}): {ready.get('message', '')[:140]}"
    )
    return "\n".join(lines)


def _wait_ready(
    api: client.ApiClient, pools: dict[str, list[str]], revision: str, timeout: float, bare: Path
) -> None:
    """Until `revision` is in force and ready: applied as it is, or under commits the controller's bot
    added on top (reports, the inventory snapshot, the audit log)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        obj = custom.get_namespaced_custom_object(API_GROUP, CRD_VERSION, NS, POLICY_REPOSITORY_PLURAL, REPO)
        status = obj.get("status") or {}
        view = _show(api, pools, status)
        if view != last:
            _say(f"[{time.strftime('%H:%M:%S')}]\n{view}")
            last = view
        ready = find(status.get("conditions"), READY) or {}
        applied = str(status.get("lastAppliedRevision", "")).rsplit("sha1:", 1)[-1]
        if ready.get("status") == "True" and applied and _contains(bare, applied, revision):
            return
        if ready.get("reason") in ("ValidationFailed", "RolloutStalled"):
            raise KgweError(f"rollout stopped: {ready.get('message')}")
        time.sleep(1.0)
    raise KgweError(f"revision {revision[:12]} not rolled out within {timeout:.0f}s")


def _contains(bare: Path, commit: str, ancestor: str) -> bool:
    """Whether `commit` is `ancestor` or comes after it in the demo's repository."""
    env = {**os.environ, **GIT_IDENTITY}
    args = ["git", "merge-base", "--is-ancestor", "--end-of-options", ancestor, commit]
    return subprocess.run(args, cwd=bare, env=env, capture_output=True).returncode == 0


def _sample_documents(kind: str, folder: str) -> list[dict[str, Any]]:
    """The `kind` documents of sample-repo/<folder>/ (the demo's budgets)."""
    from kgwe.resources import sample_repo_dir

    return [
        d
        for p in sorted((sample_repo_dir() / folder).glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if d and d.get("kind") == kind
    ]


def _prepare_cluster(api: client.ApiClient, budgets: list[dict[str, Any]]) -> None:
    """KGWE's CRDs (served before anything uses them) and the namespaces the demo and the budgets use."""
    from kgwe.cluster.client import ensure_namespace
    from kgwe.cluster.crds import install_crds

    install_crds(api)
    for ns in {NS, GPU_OPERATOR_NAMESPACE, *(n for b in budgets for n in b["spec"].get("namespaces", []))}:
        ensure_namespace(api, ns)


def _create_gpu_nodes(api: client.ApiClient) -> dict[str, list[str]]:
    """A simulated GPU node per node of sample-repo's inventory, MIG still off (the demo rolls the layouts
    out); returns pool -> node names of the pools MIG policy covers."""
    from kubernetes import client

    from kgwe.localcluster import gpunodes
    from kgwe.policy import load_repository
    from kgwe.resources import sample_repo_dir

    inventory = load_repository(sample_repo_dir() / "inventory").inventory()
    assert inventory is not None, "sample-repo has a GPUInventory"
    pools: dict[str, list[str]] = {}
    for node in inventory.spec.nodes:
        manifest = gpunodes.inventory_node_manifest(node, with_mig_layout=False)
        client.CoreV1Api(api).create_node(manifest)
        pools.setdefault(manifest["metadata"]["labels"].get(POOL_LABEL, "other"), []).append(node.name)
    _say(
        f"  {len(inventory.spec.nodes)} simulated GPU nodes from sample-repo's inventory: "
        + ", ".join(f"{p} ({len(n)})" for p, n in sorted(pools.items()))
    )
    return {p: n for p, n in pools.items() if p != "other"}


def _init_policy_repository(tmp: Path) -> tuple[Path, Path, str]:
    """A bare Git repository holding sample-repo at clusters/prod, and a clone to change it from:
    (bare, work tree, first commit)."""
    from kgwe.resources import sample_repo_dir

    bare, work = tmp / "gpu-policy.git", tmp / "gpu-policy"
    _git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
    shutil.copytree(sample_repo_dir(), work / "clusters" / "prod")
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "GPU policy for prod")
    _git(work, "remote", "add", "origin", str(bare))
    _git(work, "push", "-q", "origin", "main")
    first = _git(work, "rev-parse", "HEAD")
    return bare, work, first


def _create_policy_repository_object(api: client.ApiClient, url: str) -> None:
    from kubernetes import client

    client.CustomObjectsApi(api).create_namespaced_custom_object(
        API_GROUP,
        CRD_VERSION,
        NS,
        POLICY_REPOSITORY_PLURAL,
        {
            "apiVersion": API_VERSION,
            "kind": "PolicyRepository",
            "metadata": {"name": REPO},
            "spec": {
                "url": url,
                "ref": {"branch": "main"},
                "path": "clusters/prod",
                "interval": "5s",
                "reports": {"path": "reports/prod"},
            },
        },
    )


def _commit_policy_change(work: Path) -> str:
    """A platform engineer's change to the inference pool's MIG mix; returns the new commit."""
    _git(work, "pull", "-q", "--rebase", "origin", "main")  # the bot committed reports/
    path = work / "clusters/prod/mig/inference-h100.yaml"
    text = path.read_text()
    path.write_text(text.replace("1g.10gb: 70%", "1g.10gb: 40%").replace("2g.20gb: 20%", "2g.20gb: 50%"))
    _git(work, "commit", "-qam", "inference-h100: more 2g.20gb for the new 13B model")
    _git(work, "push", "-q", "origin", "main")
    return _git(work, "rev-parse", "HEAD")


def _send_push_webhook(port: int, commit: str, url: str) -> None:
    """The signed push event a Git host would send for `commit`."""
    from kgwe.gitops.webhook import sign

    body = json.dumps(
        {
            "ref": "refs/heads/main",
            "after": commit,
            "commits": [{"modified": ["clusters/prod/mig/inference-h100.yaml"]}],
            "repository": {"clone_url": url},  # pushes sync only the repositories they name
        }
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/git",
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


def _start_controller(
    api: client.ApiClient, cache_dir: Path, ca_file: str
) -> tuple[Controller, threading.Event, threading.Thread]:
    from kgwe.gitops.gitcmd import LOOPBACK_NETWORKS, GitAccess
    from kgwe.reconcile.controller import Controller
    from kgwe.reconcile.costs import cost_duties

    controller = Controller(
        api,
        NS,
        cache_dir=cache_dir,
        webhook_secret=SECRET,
        listen=("127.0.0.1", 0),
        lease_duration_seconds=6,
        renew_deadline_seconds=4,
        retry_period_seconds=1,
        git_access=GitAccess(ca_file=ca_file, allowed_networks=LOOPBACK_NETWORKS),  # its own Git server
        # chargeback, budget and advice metrics every 5 s (60 s and 10 min in a cluster): the demo is short
        costs=cost_duties(
            str(cache_dir.parent / "kgwe-cost.db"), cluster="demo", refresh_seconds=5.0, advice_seconds=5.0
        ),
        audit_interval_seconds=5.0,  # the audit log every 5 s at most (5 min in a cluster)
    )
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    return controller, stop, thread


def start_kgwe_scheduling(cp: ControlPlane, policy_dir: Path) -> tuple[subprocess.Popen[str], int]:
    """The extender as its own process, and kube-scheduler restarted with KGWE's rendered configuration
    (profile `kgwe-scheduler`, calling that extender). Returns the extender process and its port."""
    from kgwe.localcluster.extender_process import start_extender
    from kgwe.policy import load_repository
    from kgwe.render.objects import SCHEDULER_CONFIG_FILE
    from kgwe.render.render import RenderOptions, render

    proc, port = start_extender(cp.kubeconfig_path, "--namespace", NS)
    options = RenderOptions(
        extender_url=f"http://127.0.0.1:{port}", scheduler_name=SCHEDULER_NAME, namespace=NS
    )
    configmap = yaml.safe_load(
        render(load_repository(policy_dir), options=options).files[SCHEDULER_CONFIG_FILE]
    )
    cp.start_scheduler(yaml.safe_load(configmap["data"][SCHEDULER_CONFIG_KEY]))
    _say(f"  kube-scheduler runs KGWE's rendered config (profile kgwe-scheduler) -> extender on port {port}")
    _say(f"  extender metrics: http://127.0.0.1:{port}/metrics")
    return proc, port


# The demo's GPU jobs: (example file, namespace a budget covers, the team that budget charges).
WORKLOADS = [
    ("kgwe-readme-llm-training.yaml", "ml-training", "ml-research"),
    # no pod template: its pods come from sample-repo's torch-distributed WorkloadRuntime
    ("kgwe-prd-llm-training-job.yaml", "ml-training", "ml-research"),
    ("inference-mig.yaml", "inference-prod", "inference-platform"),
    # a short batch that completes: what a completed run cost (reports runs.md)
    ("batch-eval.yaml", "ml-training", "ml-research"),
]
SHORT_JOB = ("ml-training", "eval-nightly")  # the batch above: the demo ends it once it has been metered


def place_workloads(api: client.ApiClient, timeout: float) -> list[tuple[str, str]]:
    """The 8-GPU llm-training and the llm-training-job (its pods from a WorkloadRuntime) of
    docs/examples/gpuworkloads and a small inference service on MIG slices, as GPUWorkloads of their teams;
    prints where each pod landed and why. Returns the placed pods (namespace, name)."""
    from kubernetes import client

    from kgwe.cluster.client import ensure_namespace
    from kgwe.resources import workload_examples_dir
    from kgwe.vocab import KWOK_HOLD_ANNOTATION, WORKLOADS_ENABLED, WORKLOADS_NAMESPACE_LABEL

    examples = workload_examples_dir()
    custom = client.CustomObjectsApi(api)
    names = []
    placed: list[tuple[str, str]] = []
    for file, namespace, team in WORKLOADS:
        doc = yaml.safe_load((examples / file).read_text())
        doc["metadata"]["namespace"] = namespace  # a namespace its team's budget covers
        doc["spec"]["team"] = team  # the pods' kgwe.nvidia.io/team: the chargeback charges this team
        # the simulated kubelet keeps the job's pods running, as a real training job would for hours
        template = doc["spec"].setdefault("podTemplate", {}).setdefault("metadata", {})
        template.setdefault("annotations", {})[KWOK_HOLD_ANNOTATION] = "true"
        ensure_namespace(api, doc["metadata"]["namespace"])
        opt_in = {"metadata": {"labels": {WORKLOADS_NAMESPACE_LABEL: WORKLOADS_ENABLED}}}
        client.CoreV1Api(api).patch_namespace(doc["metadata"]["namespace"], opt_in)  # GPUWorkloads run here
        custom.create_namespaced_custom_object(
            API_GROUP, CRD_VERSION, doc["metadata"]["namespace"], GPU_WORKLOAD_PLURAL, doc
        )
        names.append((doc["metadata"]["namespace"], doc["metadata"]["name"], doc["spec"]["gpuRequirements"]))
        _say(f"  applied GPUWorkload {doc['metadata']['namespace']}/{doc['metadata']['name']} ({file})")
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    for namespace, name, req in names:
        while True:
            pods = core.list_namespaced_pod(namespace, label_selector=f"{WORKLOAD_LABEL}={name}").items
            bound = [p for p in pods if p.spec.node_name]
            wanted = 2 if req.get("migProfile") else 1
            if len(bound) >= wanted:
                break
            if time.monotonic() > deadline:
                status = custom.get_namespaced_custom_object(
                    API_GROUP, CRD_VERSION, namespace, GPU_WORKLOAD_PLURAL, name
                ).get("status", {})
                said = "; ".join(
                    f"{c['type']}={c['status']} {c.get('message', '')}" for c in status.get("conditions", [])
                )
                raise KgweError(f"GPUWorkload {namespace}/{name} not placed within {timeout:.0f}s: {said}")
            time.sleep(0.5)

        def admitted(namespace: str = namespace, name: str = name) -> dict[str, Any] | None:
            """The workload's status once its admission is written (the pods may be bound before it)."""
            obj = custom.get_namespaced_custom_object(
                API_GROUP, CRD_VERSION, namespace, GPU_WORKLOAD_PLURAL, name
            )
            status = obj.get("status") or {}
            return status if is_true(status.get("conditions"), "Admitted") else None

        _eventually(admitted, max(1.0, deadline - time.monotonic()))
        runtime = (admitted() or {}).get("runtime")
        if runtime:
            image = bound[0].spec.containers[0].image
            _say(f"  {namespace}/{name} has no pod template: WorkloadRuntime {runtime} gave it ({image})")
        for pod in sorted(bound, key=lambda p: p.metadata.name):
            node = core.read_node(pod.spec.node_name)
            product = (node.metadata.labels or {}).get(GPU_PRODUCT_LABEL, "?")
            if req.get("migProfile"):
                why = f"one MIG instance {req['migProfile']} of a MIG-partitioned {product}"
            else:
                bw = req.get("topology", {}).get("minBandwidthGBps")
                why = f"{req['count']} GPUs of {product}: one full NVLink set" + (
                    f" (>= {bw} GB/s)" if bw else ""
                )
            _say(f"    {pod.metadata.name} -> {pod.spec.node_name}: {why}")
            placed.append((namespace, pod.metadata.name))
    return placed


BURST = ("inference-prod", "4g.40gb", 4)  # namespace, a MIG profile sample-repo's shares never lay out, pods


def follow_demand(api: client.ApiClient, timeout: float) -> None:
    """Pods ask for a MIG profile no layout of the inference pool offers: the scheduler finds no node, the
    controller's next reconcile measures that demand and repartitions idle GPUs for it (MIG rebalancing,
    docs/mig-rebalancing.md), and the pods schedule."""
    from kubernetes import client

    from kgwe.vocab import KWOK_HOLD_ANNOTATION

    namespace, profile, count = BURST
    core = client.CoreV1Api(api)
    resources = {mig_resource(profile): "1"}
    for i in range(count):
        core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"burst-{i}", "annotations": {KWOK_HOLD_ANNOTATION: "true"}},
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "nodeSelector": {POOL_LABEL: "inference"},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "model",
                            "image": "vllm",
                            "resources": {"limits": resources, "requests": resources},
                        }
                    ],
                },
            },
        )
    _say(f"  {count} pods in {namespace} ask for nvidia.com/mig-{profile}; no node of the pool offers it yet")

    def pods() -> list[Any]:
        return [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name.startswith("burst-")]

    custom = client.CustomObjectsApi(api)

    def record() -> dict[str, Any]:
        repo = custom.get_namespaced_custom_object(API_GROUP, CRD_VERSION, NS, POLICY_REPOSITORY_PLURAL, REPO)
        return ((repo.get("status") or {}).get("rebalance") or {}).get("inference-h100") or {}

    if not _eventually(
        lambda: record().get("epoch", 0) >= 1 and record().get("target", {}).get(profile), timeout
    ):
        raise KgweError(f"no rebalance within {timeout:.0f}s: {record().get('message', 'no record')}")
    _say(f"  controller: {record()['message']}")
    if not _eventually(lambda: all(p.spec.node_name for p in pods()), timeout):
        raise KgweError(f"the {profile} pods were not placed within {timeout:.0f}s after the rebalance")
    for pod in sorted(pods(), key=lambda p: p.metadata.name):
        _say(f"    {pod.metadata.name} -> {pod.spec.node_name}: one {profile} instance")
    for pod in pods():  # the burst ends; its nodes may change again (KGWE never changes a node under work)
        core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    _say(
        f"  the burst ends: its pods finish; the {profile} demand stays in force for the stabilization "
        "window before the pool goes back towards its shares (docs/mig-rebalancing.md)"
    )


def finish_short_job(api: client.ApiClient, timeout: float) -> None:
    """The short batch job's pods end (as their kubelet would report), so its GPUWorkload completes."""
    from kubernetes import client

    from kgwe.localcluster.heldpods import finish_held_pod

    namespace, name = SHORT_JOB
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for pod in core.list_namespaced_pod(namespace, label_selector=f"{WORKLOAD_LABEL}={name}").items:
        finish_held_pod(api, pod)

    def phase() -> str:
        obj = custom.get_namespaced_custom_object(
            API_GROUP, CRD_VERSION, namespace, GPU_WORKLOAD_PLURAL, name
        )
        return str((obj.get("status") or {}).get("phase"))

    if not _eventually(lambda: phase() == "Succeeded", timeout):
        raise KgweError(f"GPUWorkload {namespace}/{name} did not complete within {timeout:.0f}s: {phase()}")
    _say(f"  {namespace}/{name} finished: its GPUWorkload is Succeeded")


def meter_and_report(controller: Controller, bare: Path, pods: list[tuple[str, str]], timeout: float) -> None:
    """The controller's cost duties meter the placed pods; the short batch job completes; then its cost
    reports (chargeback, budgets, forecast, rightsizing, and the advice: spot, efficiency, cost per run) are
    committed to the policy repository now rather than on their schedule."""
    assert controller.costs is not None  # the demo's controller runs the cost duties
    store = controller.costs.service.store
    deadline = time.monotonic() + timeout
    while not set(pods) <= {(iv.namespace, iv.pod) for iv in store.open_usage()}:
        if time.monotonic() > deadline:
            raise KgweError(f"the workloads' pods were not metered within {timeout:.0f}s")
        time.sleep(0.5)
    _say(f"  metering: {len(pods)} pods hold GPUs; letting them run a few seconds ...")
    time.sleep(5)
    finish_short_job(controller.api_client, timeout)
    result = controller.commit_reports_now(REPO)
    if result is None or result.status not in ("pushed", "unchanged"):
        raise KgweError(f"cost reports not committed: {getattr(result, 'reason', None) or result}")
    sha = result.sha
    assert sha is not None  # pushed or unchanged: it names the commit
    files = _git(bare, "show", "--name-only", "--format=", sha).split()
    who = _git(bare, "log", "-1", "--format=%an: %s", sha)
    _say(f"  cost reports committed as {sha[:12]} ({who}):")
    for file in files:
        _say(f"    {file}")
    chargeback = next((f for f in files if f.endswith("/chargeback.md")), None)
    if chargeback:
        text = _git(bare, "show", f"{sha}:{chargeback}").split("\n## By GPU product")[0]
        _say(f"  {chargeback} (GPU-hours by team and namespace):")
        _say("\n".join(f"    {line}" for line in text.splitlines() if line.startswith("|")))
    for name, what in (
        ("spot.md", "GPUWorkloads that could run on spot"),
        ("runs.md", "cost per completed run"),
    ):
        report = next((f for f in files if f.endswith("/" + name)), None)
        if report:
            text = _git(bare, "show", f"{sha}:{report}").split("\n## ")[0]
            _say(f"  {report} ({what}):")
            _say("\n".join(f"    {line}" for line in text.splitlines() if line.startswith(("|", "**"))))


def _start_prometheus(tmp: Path, controller_port: int, extender_port: int) -> PrometheusServer:
    from kgwe.localcluster.prometheus import PrometheusServer
    from kgwe.observability.rules import RULES_FILE

    targets = {
        CONTROLLER_NAME: f"127.0.0.1:{controller_port}",
        EXTENDER_NAME: f"127.0.0.1:{extender_port}",
    }
    # The shipped rules without their `for:` windows: a demo cannot wait 5-15 minutes to see an alert fire.
    rules = yaml.safe_load(RULES_FILE.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("for", None)
    (tmp / "kgwe-alerts-now.yaml").write_text(yaml.safe_dump(rules))
    prom = PrometheusServer(
        targets, tmp / "prometheus", rule_files=(tmp / "kgwe-alerts-now.yaml",)
    ).__enter__()
    _say(f"  Prometheus http://127.0.0.1:{prom.port} scrapes the controller and the extender every second")
    return prom


def _eventually(check: Callable[[], object], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(1.0)
    return False


def _check_monitoring(
    prom: PrometheusServer,
    api: client.ApiClient,
    pools: dict[str, list[str]],
    extender: subprocess.Popen[str],
) -> None:
    """Every dashboard panel has data on the real Prometheus; then provoke alerts and see them fire (rules
    evaluated every second, `for:` windows dropped): a node's MIG manager reports failed, a GPU turns
    unhealthy, the extender stops."""
    from kubernetes import client

    from kgwe.localcluster.prometheus import panel_coverage
    from kgwe.topology import health

    _say("\n== monitoring: the dashboards' queries on a real Prometheus, and provoked alerts ==")
    time.sleep(5)  # a few scrapes after the last change, so rates have two samples
    coverage = panel_coverage(prom)
    node = next(n for names in pools.values() for n in names)
    client.CoreV1Api(api).patch_node(node, {"metadata": {"labels": {MIG_STATE_LABEL: "failed"}}})
    provoked = {"KGWEMIGConfigFailed": _eventually(lambda: "KGWEMIGConfigFailed" in prom.firing())}
    fault = health.GPUFault("XID79", "GPU has fallen off the bus", datetime.now(UTC))  # as the agent writes
    sick = {"metadata": {"annotations": {health.ANNOTATION_KEY: health.encode({3: fault})}}}
    client.CoreV1Api(api).patch_node(node, sick)
    provoked["KGWEGPUUnhealthy"] = _eventually(lambda: "KGWEGPUUnhealthy" in prom.firing())
    extender.terminate()
    provoked["KGWEExtenderDown"] = _eventually(lambda: "KGWEExtenderDown" in prom.firing())
    for line in coverage["missing"]:
        _say(f"  no data: {line}")
    _say(
        f"  {coverage['panels_with_data']} of {coverage['panels']} panels have data "
        f"({coverage['panels_needing_dcgm']} more need dcgm-exporter); alerts provoked: "
        + ", ".join(f"{k} {'fired' if v else 'DID NOT FIRE'}" for k, v in provoked.items())
    )
    print(json.dumps({**coverage, "alerts_provoked": provoked}, sort_keys=True))


def run(args: argparse.Namespace) -> int:
    from kgwe.localcluster.controlplane import ControlPlane, find_binaries
    from kgwe.localcluster.deviceplugin import DevicePluginStandIn
    from kgwe.localcluster.gitserver import GitHttpsServer
    from kgwe.localcluster.migmanager import MigManagerStandIn

    keep = _keep_repo_target(args.keep_repo)
    budgets = _sample_documents("GPUBudget", "budgets")
    _say("KGWE demo: starting a local control plane (etcd, kube-apiserver, kube-scheduler, kwok) ...")
    with tempfile.TemporaryDirectory(prefix="kgwe-demo-") as tmp_name, ControlPlane(find_binaries()) as cp:
        tmp = Path(tmp_name)
        api = cp.new_api_client()
        _say(f"  API server {cp.server_url}; kubeconfig {cp.kubeconfig_path}")
        _prepare_cluster(api, budgets)
        pools = _create_gpu_nodes(api)
        bare, work, first = _init_policy_repository(tmp)
        # Served over real HTTPS on loopback: PolicyRepository URLs must be https:// or ssh://.
        git_server = GitHttpsServer(tmp)
        url = git_server.url(bare.name)
        _say(f"  policy repository {url} (sample-repo at clusters/prod), commit {first[:12]}")
        with (
            git_server,
            MigManagerStandIn(
                api,
                delay_seconds=args.mig_delay,
                config_namespace=GPU_OPERATOR_NAMESPACE,
                config_map=MIG_PARTED_CONFIGMAP,
            ),
            DevicePluginStandIn(api, delay_seconds=args.mig_delay),  # time-slices sample-repo's L40S pool
        ):
            controller, stop, thread = _start_controller(api, tmp / "cache", git_server.ca_file)
            _create_policy_repository_object(api, url)
            assert controller.server is not None  # it listens: `listen` was given
            port = controller.server.port
            _say(
                f"\n== controller running (webhook and metrics on 127.0.0.1:{port}); "
                "rolling out the initial layouts =="
            )
            _say(
                f"   metrics: http://127.0.0.1:{port}/metrics; Grafana dashboards to import: "
                "deploy/helm/kgwe/files/monitoring/dashboards/*.json (alerts: kgwe-alerts.yaml beside them)"
            )
            _say("   node=<nvidia.com/mig.config>  ✓ MIG manager reports success  ⟳ pending  ✗ failed")
            _say("   node=<nvidia.com/device-plugin.config> ×<replicas GFD reports>")
            try:
                _wait_ready(api, pools, first, args.timeout, bare)
                _say("\n== GPU jobs: GPUWorkloads placed by KGWE's scheduler after the MIG rollout ==")
                extender, extender_port = start_kgwe_scheduling(cp, work / "clusters" / "prod")
                prom = _start_prometheus(tmp, port, extender_port) if args.prometheus else None
                try:
                    pods = place_workloads(api, args.timeout)
                    _say("\n== cost: the controller meters the jobs and commits a chargeback report ==")
                    meter_and_report(controller, bare, pods, args.timeout)
                    _say("\n== demand no layout offers: the controller rebalances the inference pool ==")
                    follow_demand(api, args.timeout)
                    _say(
                        "\n== a platform engineer changes the inference pool's MIG mix (commit + webhook) =="
                    )
                    second = _commit_policy_change(work)
                    _send_push_webhook(port, second, url)
                    _wait_ready(api, pools, second, args.timeout, bare)
                    if prom is not None:
                        _check_monitoring(prom, api, pools, extender)
                finally:
                    extender.terminate()
                    if prom is not None:
                        prom.__exit__(None, None, None)
                log = _git(bare, "log", "--format=%h %an: %s", "-5", "main")
                _say(
                    "\n== done: the cluster matches the repository ==\nrecent commits (the bot's inventory "
                    f"snapshot under reports/ feeds `kgwe plan` in CI):\n{log}"
                )
                _say_audit(bare)
            finally:
                stop.set()
                thread.join(timeout=20)
                if keep is not None:
                    keep_repository(bare, keep)
    return 0


def _say_audit(bare: Path) -> None:
    """Where the audit log is, and its newest line: which commit, by whom, changed what (docs/audit.md)."""
    from kgwe.audit.log import is_log_path

    logs = sorted(
        p for p in _git(bare, "ls-tree", "-r", "--name-only", "main", "reports").split() if is_log_path(p)
    )
    if not logs:
        _say("audit log: nothing committed yet (it goes out with the next snapshot, or within 5 s)")
        return
    lines = _git(bare, "show", f"main:{logs[-1]}").splitlines()
    _say(f"audit log {logs[-1]} ({len(lines)} lines; what each reconcile wrote, and which commit caused it):")
    _say("  " + (lines[-1] if lines else "(empty)"))


def _keep_repo_target(path: Path | None) -> Path | None:
    """Where --keep-repo puts the repository, refused before anything starts if it would overwrite."""
    if path is None:
        return None
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise KgweError(f"--keep-repo {path}: exists and is not an empty directory")
    return path.resolve()


def keep_repository(bare: Path, target: Path) -> None:
    """A checkout of the demo's policy repository at `target`, standing alone (no remote: the demo's Git
    server is gone once it ends)."""
    _git(bare.parent, "clone", "-q", "-b", "main", str(bare), str(target))
    _git(target, "remote", "remove", "origin")
    count = _git(target, "rev-list", "--count", "HEAD")
    reports = sorted(
        {p.split("/", 3)[2] for p in _git(target, "ls-files", "reports").split() if p.count("/") >= 3}
    )
    _say(
        f"\npolicy repository kept in {target}: {count} commits (`git -C {target} log --stat`); "
        f"what the controller committed is under reports/ ({', '.join(reports) or 'nothing yet'})"
    )
