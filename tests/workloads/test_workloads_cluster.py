"""GPUWorkloads end to end on real components: kube-apiserver and kube-scheduler with the GenericWorkload
gate (native PodGroup gang scheduling), the real kube-controller-manager (Job controller, garbage
collector), kube-scheduler running KGWE's RENDERED KubeSchedulerConfiguration (profile kgwe-scheduler)
calling the real `kgwe extender` process, and the GPUWorkload reconciler.

The simulated kubelets (kwok) run pods; a pod annotated `kgwe.nvidia.io/test-hold` stays Running until the
test finishes it (the test plays the kubelet for that one status write)."""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from kgwe.cluster.events import EventRecorder
from kgwe.cost.service import CostService
from kgwe.cost.store import CostStore
from kgwe.localcluster.controlplane import default_scheduler_config
from kgwe.localcluster.extender_process import start_extender
from kgwe.localcluster.heldpods import finish_held_pod
from kgwe.policy import load_repository
from kgwe.reconcile.costs import CostDuties
from kgwe.reconcile.repository import RepositoryReconciler
from kgwe.render.render import RenderOptions, render
from kgwe.resources import sample_repo_dir
from kgwe.vocab import API_GROUP as GROUP
from kgwe.vocab import CRD_VERSION as VERSION
from kgwe.vocab import GPU_WORKLOAD_PLURAL as PLURAL
from kgwe.vocab import KWOK_HOLD_ANNOTATION, WORKLOADS_ENABLED, WORKLOADS_NAMESPACE_LABEL
from kgwe.workloads.controller import (
    WorkloadController,
    WorkloadMetrics,
    WorkloadReconciler,
)
from kgwe.workloads.convert import convert
from tests.harness.crds import install_crds
from tests.harness.policyrepos import delete_unreleased
from tests.harness.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "gpuworkloads"
FIXTURES = Path(__file__).parent / "fixtures"
HOLD = KWOK_HOLD_ANNOTATION

pytestmark = pytest.mark.cluster

SCORING = """
apiVersion: kgwe.nvidia.io/v1
kind: ScoringProfile
metadata: {name: default}
spec: {default: true, strategy: BestFit, extender: {weight: 5, ignorable: false, httpTimeout: 5s}}
---
apiVersion: kgwe.nvidia.io/v1
kind: ScoringProfile
metadata: {name: least-loaded}
spec: {strategy: LeastLoaded}
"""


_DUMP: list[Callable[[], str]] = []  # what the current test's cluster looks like, for a timeout's message


def eventually(check: Callable[[], object], what: str, timeout: float = 90.0) -> object:
    return wait_for(what, check, timeout, describe=lambda: "\n".join(d() for d in _DUMP))


def looked_at_again(stack: dict, times: int = 2) -> None:
    """What the periodic resync does, `times` over and at once: every workload queued and reconciled again
    (instead of waiting out resync periods to see that nothing more happens)."""
    controller = stack["controller"]
    for _ in range(times):
        before = controller.reconciles
        controller.resync()
        eventually(lambda before=before: controller.reconciles > before, "the resync's reconcile")


def _dump(k8s_api, namespace: str) -> str:
    custom, core = client.CustomObjectsApi(k8s_api), client.CoreV1Api(k8s_api)
    lines = []
    for w in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]:
        lines.append(f"GPUWorkload {w['metadata']['name']}: {w.get('status')}")
    for p in core.list_namespaced_pod(namespace).items:
        lines.append(f"pod {p.metadata.name}: {p.status.phase} on {p.spec.node_name} {p.status.conditions}")
    for e in core.list_namespaced_event(namespace).items[-30:]:
        lines.append(f"event {e.involved_object.kind}/{e.involved_object.name} {e.reason}: {e.message}")
    for j in client.BatchV1Api(k8s_api).list_namespaced_job(namespace).items:
        lines.append(f"job {j.metadata.name}: {j.status}")
    return "\n".join(lines)


@contextlib.contextmanager
def kgwe_stack(
    control_plane, k8s_api, policy_namespace: str, tmp_path: Path, reconciler_api=None
) -> Iterator[dict]:
    """Extender process + kube-scheduler with the rendered config + the GPUWorkload reconciler (talking to
    the API server through `reconciler_api`, e.g. impersonating the controller's ServiceAccount)."""
    install_crds(k8s_api)
    (tmp_path / "scoring.yaml").write_text(SCORING)
    for runtime in (sample_repo_dir() / "runtimes").glob("*.yaml"):  # sample-repo's WorkloadRuntimes
        (tmp_path / runtime.name).write_text(runtime.read_text())
    ps = load_repository(tmp_path)
    proc, port = start_extender(control_plane.kubeconfig_path, "--namespace", policy_namespace)
    stop = threading.Event()
    try:  # the extender ends however the rest goes
        rendered = render(
            ps,
            options=RenderOptions(
                extender_url=f"http://127.0.0.1:{port}",
                scheduler_name="kgwe-scheduler",
                namespace=policy_namespace,
            ),
        )
        core = client.CoreV1Api(k8s_api)
        for file in ("scoring.yaml", "runtimes.yaml"):  # what the policy reconciler applies
            cm = yaml.safe_load(rendered.files[file])
            try:
                core.create_namespaced_config_map(policy_namespace, cm)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                core.replace_namespaced_config_map(cm["metadata"]["name"], policy_namespace, cm)
        cm = yaml.safe_load(rendered.files["kube-scheduler-config.yaml"])
        config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
        assert config["profiles"] == [{"schedulerName": "kgwe-scheduler"}]
        control_plane.start_scheduler(config)
        api = reconciler_api or k8s_api
        reconciler = WorkloadReconciler(
            api,
            recorder=EventRecorder(api),
            metrics=WorkloadMetrics(CollectorRegistry()),
            is_leader=lambda: True,
            policy_namespace=policy_namespace,
        )
        controller = WorkloadController(reconciler, resync_seconds=5)
        controller.start(stop)
        yield {"port": port, "reconciler": reconciler, "controller": controller, "repo": tmp_path}
    finally:
        stop.set()
        try:
            control_plane.start_scheduler(default_scheduler_config())
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def opt_in(k8s_api, namespace: str) -> None:
    """Label the namespace so GPUWorkloads may run there."""
    label = {"metadata": {"labels": {WORKLOADS_NAMESPACE_LABEL: WORKLOADS_ENABLED}}}
    client.CoreV1Api(k8s_api).patch_namespace(namespace, label)


@pytest.fixture
def stack(control_plane, k8s_api, namespace, tmp_path) -> Iterator[dict]:
    """The stack with its own policy namespace (KGWE's, where no workload runs) beside the test's."""
    from kgwe.cluster.client import ensure_namespace
    from tests.harness.pytest_cluster import delete_namespace

    opt_in(k8s_api, namespace)
    policy_namespace = f"{namespace}-kgwe"
    ensure_namespace(k8s_api, policy_namespace)
    try:
        with kgwe_stack(control_plane, k8s_api, policy_namespace, tmp_path) as parts:
            _DUMP[:] = [lambda: _dump(k8s_api, namespace)]
            yield {**parts, "namespace": namespace, "policy_namespace": policy_namespace}
    finally:
        delete_namespace(client.CoreV1Api(k8s_api), policy_namespace)


def _create(k8s_api, namespace: str, doc: dict, tag: dict[str, str], hold: bool = False) -> str:
    doc = yaml.safe_load(yaml.safe_dump(doc))
    doc.setdefault("metadata", {})["namespace"] = namespace
    tmpl = doc["spec"].setdefault("podTemplate", {})
    tmpl.setdefault("spec", {}).setdefault("nodeSelector", {}).update(tag)  # only this test's nodes
    if hold:
        tmpl.setdefault("metadata", {}).setdefault("annotations", {})[HOLD] = "true"
    client.CustomObjectsApi(k8s_api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)
    return doc["metadata"]["name"]


def _get(k8s_api, namespace: str, name: str) -> dict:
    return client.CustomObjectsApi(k8s_api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )


def _cond(wl: dict, ctype: str) -> dict:
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def _pods(k8s_api, namespace: str, name: str) -> list:
    core = client.CoreV1Api(k8s_api)
    return core.list_namespaced_pod(namespace, label_selector=f"kgwe.nvidia.io/workload={name}").items


def _bound(k8s_api, namespace: str, name: str) -> list:
    return [
        p
        for p in _pods(k8s_api, namespace, name)
        if p.spec.node_name and p.status.phase in ("Pending", "Running")
    ]


def _finish(k8s_api, namespace: str, pod, ok: bool = True) -> None:
    """Play the kubelet: the pod's container exits 0 (or 1)."""
    assert pod.metadata.namespace == namespace
    finish_held_pod(k8s_api, pod, ok=ok)


def _tag() -> dict[str, str]:
    return {"kgwe-wl-test": secrets.token_hex(3)}


def test_readme_workload_lands_on_one_nodes_full_nvlink_set(stack, k8s_api, namespace, gpu_node):
    tag = _tag()
    node = gpu_node("DGX-A100", labels=tag)
    gpu_node("L40S-8-PCIE", labels=tag)  # 8 GPUs too, but PCIe only: far below 600 GB/s
    doc = yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text())
    name = _create(k8s_api, namespace, doc, tag, hold=True)
    wl = eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and _cond(w, "PodsReady").get("status") == "True" and w,
        "llm-training running",
    )
    assert wl["status"]["phase"] == "Running"
    assert wl["status"]["nodes"] == node
    assert wl["status"]["gpus"] == 8
    assert [p["node"] for p in wl["status"]["placements"]] == [node]
    pod = _pods(k8s_api, namespace, name)[0]
    assert pod.spec.scheduler_name == "kgwe-scheduler"
    assert pod.metadata.annotations["kgwe.nvidia.io/min-bandwidth-gbps"] == "300"  # per direction
    _finish(k8s_api, namespace, pod)
    wl = eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and w["status"].get("phase") == "Succeeded" and w,
        "llm-training succeeded",
    )
    assert _cond(wl, "Complete")["reason"] == "Completed"


def test_a_gpu_turning_unhealthy_under_a_running_workload_sets_its_condition(
    stack, k8s_api, namespace, gpu_node
):
    from datetime import UTC, datetime

    from kgwe.topology import health

    tag = _tag()
    node = gpu_node("DGX-A100", labels=tag)
    doc = yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text())
    name = _create(k8s_api, namespace, doc, tag, hold=True)
    eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and _cond(w, "GPUsHealthy").get("status") == "True",
        "running on healthy GPUs",
    )
    pod = _pods(k8s_api, namespace, name)[0]
    fault = health.GPUFault("XID79", "GPU has fallen off the bus", datetime.now(UTC))
    annotations = {
        health.ANNOTATION_KEY: health.encode({2: fault}),  # what the agent writes
        "kgwe.nvidia.io/gpu-pods": json.dumps({str(i): f"{namespace}/{pod.metadata.name}" for i in range(8)}),
    }
    client.CoreV1Api(k8s_api).patch_node(node, {"metadata": {"annotations": annotations}})
    wl = eventually(
        lambda: (
            (w := _get(k8s_api, namespace, name)) and _cond(w, "GPUsHealthy").get("status") == "False" and w
        ),
        "GPUsHealthy False",
    )
    assert f"{pod.metadata.name} on {node} GPU 2 (XID79)" in _cond(wl, "GPUsHealthy")["message"]
    assert wl["status"]["phase"] == "Running"  # it keeps running; restarting is the owner's call
    client.CoreV1Api(k8s_api).patch_node(node, {"metadata": {"annotations": {health.ANNOTATION_KEY: "{}"}}})
    eventually(
        lambda: _cond(_get(k8s_api, namespace, name), "GPUsHealthy").get("status") == "True", "healthy again"
    )


def test_kubectl_get_shows_phase_gpus_nodes_age(stack, k8s_api, namespace, gpu_node):
    tag = _tag()
    node = gpu_node("DGX-A100", labels=tag)
    doc = yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text())
    name = _create(k8s_api, namespace, doc, tag, hold=True)
    eventually(lambda: _get(k8s_api, namespace, name).get("status", {}).get("phase") == "Running", "running")
    # what `kubectl get gpuworkloads` asks the API server for: a Table built from the printer columns
    response = client.CustomObjectsApi(k8s_api).list_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        _headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        _preload_content=False,
    )
    table = json.loads(response.data)
    columns = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert columns == ["Name", "Phase", "GPUs", "Nodes", "Age"]
    row = table["rows"][0]["cells"]
    assert row[:4] == [name, "Running", 8, node]


def test_inference_on_mig_slices_is_a_deployment_without_a_gang(stack, k8s_api, namespace, gpu_node):
    tag = _tag()
    mig = gpu_node("DGX-H100", labels=tag, mig_layout=[["1g.10gb"] * 7] * 8)
    gpu_node("DGX-A100", labels=tag)  # whole GPUs only: no 1g.10gb there
    doc = yaml.safe_load((EXAMPLES / "inference-mig.yaml").read_text())
    name = _create(k8s_api, namespace, doc, tag)
    wl = eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and w.get("status", {}).get("phase") == "Running" and w,
        "inference running",
    )
    assert wl["status"]["gangBackend"] == "None"  # serving replicas are not a gang, whatever the cluster has
    assert wl["status"]["nodes"] == mig
    pods = _pods(k8s_api, namespace, name)
    assert len(pods) == 2
    assert all(p.spec.containers[0].resources.limits == {"nvidia.com/mig-1g.10gb": "1"} for p in pods)


def test_two_gpu_workload_gets_the_best_pair(stack, k8s_api, namespace, gpu_node):
    tag = _tag()
    pairs = gpu_node("A100-PCIE-NVLINK-PAIRS", labels=tag)
    gpu_node("L40S-8-PCIE", labels=tag)
    doc = {
        "apiVersion": "kgwe.nvidia.io/v1",
        "kind": "GPUWorkload",
        "metadata": {"name": "pair"},
        "spec": {
            "gpuRequirements": {"count": 2, "topology": {"preference": "NVLinkOptimal"}},
            "podTemplate": {"spec": {"containers": [{"name": "t", "image": "busybox"}]}},
        },
    }
    name = _create(k8s_api, namespace, doc, tag, hold=True)
    wl = eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and w.get("status", {}).get("nodes") and w,
        "pair placed",
    )
    assert wl["status"]["nodes"] == pairs


def test_two_16_gpu_gangs_on_24_gpus_one_runs_whole_the_other_waits_whole(
    stack, k8s_api, namespace, gpu_node
):
    tag = _tag()
    nodes = {gpu_node("DGX-A100", labels=tag) for _ in range(3)}
    doc = yaml.safe_load((EXAMPLES / "distributed-16gpu.yaml").read_text())
    doc["spec"]["gang"]["timeoutSeconds"] = 3  # the waiting gang says so, and keeps waiting whole
    first = _create(k8s_api, namespace, {**doc, "metadata": {"name": "gang-a"}}, tag, hold=True)
    second = _create(k8s_api, namespace, {**doc, "metadata": {"name": "gang-b"}}, tag, hold=True)
    pg = client.CustomObjectsApi(k8s_api)

    def placed() -> dict[str, int] | None:
        counts = {n: len(_bound(k8s_api, namespace, n)) for n in (first, second)}
        return counts if sum(counts.values()) >= 2 else None

    eventually(placed, "one gang placed")
    # The other gang's 3 s gang timeout passing proves the scheduler had every chance to place part of it.
    eventually(
        lambda: any(
            _cond(_get(k8s_api, namespace, n), "PodsScheduled").get("reason") == "GangTimeout"
            for n in (first, second)
        ),
        "a gang timing out",
    )
    counts = {n: len(_bound(k8s_api, namespace, n)) for n in (first, second)}
    assert sorted(counts.values()) == [0, 2], counts  # whole or nothing, never 1
    running, waiting = (first, second) if counts[first] == 2 else (second, first)
    assert {p.spec.node_name for p in _bound(k8s_api, namespace, running)} <= nodes
    assert len({p.spec.node_name for p in _bound(k8s_api, namespace, running)}) == 2
    groups = pg.list_namespaced_custom_object("scheduling.k8s.io", "v1beta1", namespace, "podgroups")["items"]
    assert {g["metadata"]["name"] for g in groups} == {f"{first}-r0", f"{second}-r0"}
    assert _get(k8s_api, namespace, waiting)["status"]["phase"] == "Pending"
    timeout = eventually(
        lambda: (
            (c := _cond(_get(k8s_api, namespace, waiting), "PodsScheduled")).get("reason") == "GangTimeout"
            and c
        ),
        "GangTimeout reported",
    )
    assert timeout["message"].startswith("0/2 pods scheduled; not all within 3s (gang Native)")
    assert len(_bound(k8s_api, namespace, waiting)) == 0
    for pod in _bound(k8s_api, namespace, running):
        _finish(k8s_api, namespace, pod)
    eventually(
        lambda: _get(k8s_api, namespace, running)["status"].get("phase") == "Succeeded", "first gang done"
    )
    eventually(lambda: len(_bound(k8s_api, namespace, waiting)) == 2, "second gang placed whole", timeout=120)


def test_member_failure_restarts_the_gang_eviction_does_not_count(stack, k8s_api, namespace, gpu_node):
    tag = _tag()
    for _ in range(2):
        gpu_node("DGX-A100", labels=tag)
    doc = yaml.safe_load((EXAMPLES / "distributed-16gpu.yaml").read_text())
    doc["metadata"] = {"name": "retry"}
    doc["spec"]["retryPolicy"] = {"maxRetries": 1, "backoffSeconds": 2, "jitter": 0}
    name = _create(k8s_api, namespace, doc, tag, hold=True)
    eventually(lambda: len(_bound(k8s_api, namespace, name)) == 2, "gang placed")
    core = client.CoreV1Api(k8s_api)
    # 1. an eviction: the Job replaces the pod, nothing is counted
    victim = _bound(k8s_api, namespace, name)[0]
    core.create_namespaced_pod_eviction(
        victim.metadata.name,
        namespace,
        client.V1Eviction(metadata=client.V1ObjectMeta(name=victim.metadata.name)),
    )
    # the kubelet stops the evicted pod's container (kwok only deletes; the Job's finalizer waits for that)
    eventually(
        lambda: core.read_namespaced_pod(victim.metadata.name, namespace).metadata.deletion_timestamp,
        "evicting",
    )
    _finish(k8s_api, namespace, core.read_namespaced_pod(victim.metadata.name, namespace), ok=False)
    eventually(
        lambda: (
            len([p for p in _bound(k8s_api, namespace, name) if p.metadata.name != victim.metadata.name]) == 2
        ),
        "evicted member replaced",
    )
    wl = _get(k8s_api, namespace, name)
    assert wl["status"].get("retryCount", 0) == 0 and wl["status"]["run"] == 0
    # 2. a member fails: the whole gang restarts as run 1 after the backoff
    _finish(k8s_api, namespace, _bound(k8s_api, namespace, name)[0], ok=False)
    wl = eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and w["status"].get("retryCount") == 1 and w,
        "gang restart",
    )
    assert _cond(wl, "PodsScheduled")["reason"] == "Restarting"
    assert wl["status"]["nextRetryTime"]
    eventually(
        lambda: (
            len(
                [
                    p
                    for p in _bound(k8s_api, namespace, name)
                    if p.metadata.labels["kgwe.nvidia.io/run"] == "1"
                ]
            )
            == 2
        ),
        "run 1 placed whole",
    )
    # 3. retries used up: the next failure is final
    _finish(k8s_api, namespace, _bound(k8s_api, namespace, name)[0], ok=False)
    wl = eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and w["status"].get("phase") == "Failed" and w, "failed"
    )
    assert _cond(wl, "Failed")["reason"] == "BackoffLimitExceeded"


BUDGET_POLICY = {
    "policy/pricing.yaml": """apiVersion: kgwe.nvidia.io/v1
kind: PricingCatalog
metadata: {name: default}
spec:
  currency: USD
  gpus:
    - {product: NVIDIA-A100-SXM4-80GB, onDemandPerHour: "2.50"}
""",
    "policy/budget.yaml": """apiVersion: kgwe.nvidia.io/v1
kind: GPUBudget
metadata: {name: ml-research}
spec:
  team: ml-research
  namespaces: [NAMESPACE]
  period: Monthly
  limit: {amount: "1", currency: USD}
  quota: {nvidia.com/gpu: 16}
  alerts: [{at: 100%, action: Enforce}]
""",
}


@pytest.fixture
def budget_repository(k8s_api, namespace, tmp_path) -> Iterator[RepositoryReconciler]:
    """A PolicyRepository (pricing + an Enforce GPUBudget over the test namespace) served over HTTPS on
    loopback, and the controller's reconciler for it."""
    from kgwe.cluster.client import ensure_namespace
    from kgwe.gitops.gitcmd import GitAccess
    from kgwe.localcluster.gitserver import GitHttpsServer

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@x", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    bare, work = tmp_path / "policy.git", tmp_path / "work"

    def run(cwd: Path, *args: str) -> None:
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)

    run(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    run(tmp_path, "init", "-q", "-b", "main", str(work))
    for rel, text in BUDGET_POLICY.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text.replace("NAMESPACE", namespace))
    run(work, "add", "-A")
    run(work, "commit", "-qm", "budget")
    run(work, "push", "-q", str(bare), "main")
    name = f"budget-{secrets.token_hex(3)}"
    for ns in ("kgwe-system", "gpu-operator"):  # the controller's and the MIG manager's namespaces
        ensure_namespace(k8s_api, ns)
    with GitHttpsServer(tmp_path) as server:
        body = {
            "apiVersion": "kgwe.nvidia.io/v1",
            "kind": "PolicyRepository",
            "metadata": {"name": name},
            "spec": {"url": server.url(bare.name), "ref": {"branch": "main"}, "path": "policy"},
        }
        custom = client.CustomObjectsApi(k8s_api)
        custom.create_namespaced_custom_object(GROUP, VERSION, "kgwe-system", "policyrepositories", body)
        try:
            yield RepositoryReconciler(
                k8s_api,
                "kgwe-system",
                name,
                cache_dir=tmp_path / "cache",
                git_access=GitAccess(ca_file=server.ca_file),
            )
        finally:
            delete_unreleased(custom, "kgwe-system", name)


def test_exhausted_enforce_budget_blocks_admission_and_lifts_next_period(
    stack, k8s_api, namespace, gpu_node, budget_repository, tmp_path
):
    """KGWE's own budget evaluation decides: an hour of GPU use exhausts the $1 Enforce budget, the cost
    duties cap the kgwe-budget quota at current use, the workload is refused; in the next month the spend
    starts from zero, the cap lifts, and the waiting workload is admitted."""
    tag = _tag()
    node = gpu_node("DGX-A100", labels=tag)
    gpu_node("DGX-A100", labels=tag)  # a whole free node for the 8-GPU workload
    core = client.CoreV1Api(k8s_api)
    clock = {"now": datetime.now(UTC)}
    store = CostStore(str(tmp_path / "cost.db"))
    store.migrate()
    duties = CostDuties(CostService(store, cluster="t"), refresh_seconds=0, now=lambda: clock["now"])
    rec = budget_repository
    rec.budget_caps = duties.budget_caps  # as the controller wires them

    def reconcile() -> None:  # what the controller runs for a repository: reconcile, then the cost duties
        outcome = rec.reconcile()
        assert outcome is not None and outcome.phase not in ("apply_failed", "invalid"), outcome
        duties.after_reconcile(rec.view(rec.read()))

    def quota_gpus() -> str | None:
        try:
            return core.read_namespaced_resource_quota("kgwe-budget", namespace).spec.hard.get(
                "requests.nvidia.com/gpu"
            )
        except ApiException:
            return None

    duties.start(k8s_api)
    try:
        reconcile()
        assert quota_gpus() == "16"
        core.create_namespaced_pod(  # the team's earlier job: 1 GPU
            namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name="earlier", labels={"kgwe.nvidia.io/team": "ml-research"}),
                spec=client.V1PodSpec(
                    node_name=node,
                    tolerations=[client.V1Toleration(operator="Exists")],
                    containers=[
                        client.V1Container(
                            name="c",
                            image="train:1",
                            resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                        )
                    ],
                ),
            ),
        )
        eventually(lambda: any(iv.pod == "earlier" for iv in store.open_usage()), "the pod metered")
        clock["now"] += timedelta(hours=1)  # an A100-hour at $2.50 exhausts the $1 budget
        reconcile()  # the cost duties' cap is applied in the same pass
        assert quota_gpus() == "1"  # capped at current use

        doc = yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text())
        name = _create(k8s_api, namespace, doc, tag, hold=True)
        refused = "BudgetExhausted"  # once the quota controller counts the earlier pod as used
        wl = eventually(
            lambda: (
                (w := _get(k8s_api, namespace, name)) and _cond(w, "Admitted").get("reason") == refused and w
            ),
            "refused for the exhausted budget",
        )
        assert _cond(wl, "Admitted")["reason"] == "BudgetExhausted"
        assert "GPUBudget ml-research" in _cond(wl, "Admitted")["message"]
        assert _pods(k8s_api, namespace, name) == []
        assert client.BatchV1Api(k8s_api).list_namespaced_job(namespace).items == []  # nothing half-created

        # The next month begins (the earlier job still runs): this month's spend is ten minutes of one GPU,
        # under the limit, so KGWE's own evaluation lifts the cap.
        now = clock["now"]
        clock["now"] = (now.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1, minute=10)
        reconcile()
        assert quota_gpus() == "16"
        stack["controller"].queue.add(f"{namespace}/{name}")
        eventually(
            lambda: _cond(_get(k8s_api, namespace, name), "Admitted").get("status") == "True", "admitted"
        )
        eventually(lambda: len(_bound(k8s_api, namespace, name)) == 1, "placed")
    finally:
        duties.stop()


def test_converted_seed_examples_run(stack, k8s_api, namespace, gpu_node):
    tag = _tag()
    gpu_node("DGX-A100", labels=tag)
    orchestrator = convert(
        yaml.safe_load((FIXTURES / "gpu-orchestrator-my-model.yaml").read_text()), image="busybox"
    ).manifest
    del orchestrator["spec"]["priority"]  # the seed's "high" names a PriorityClass this cluster lacks
    agentaflow = convert(yaml.safe_load((FIXTURES / "agentaflow-my-training-job.yaml").read_text())).manifest
    names = [_create(k8s_api, namespace, d, tag, hold=True) for d in (orchestrator, agentaflow)]
    for name in names:
        eventually(
            lambda name=name: _get(k8s_api, namespace, name).get("status", {}).get("phase") == "Running",
            f"{name} running",
        )
    pod = _pods(k8s_api, namespace, names[0])[0]
    assert pod.metadata.annotations["kgwe.nvidia.io/scoring-profile"] == "least-loaded"


def test_the_prd_example_runs_as_written_with_the_repositorys_runtime(stack, k8s_api, namespace, gpu_node):
    """No pod template, only `framework: PyTorch` and `workloadType: DistributedTraining`: the pods come from
    the repository's torch-distributed WorkloadRuntime, and the workload says so."""
    tag = _tag()
    node = gpu_node("DGX-A100", labels=tag)
    doc = yaml.safe_load((EXAMPLES / "kgwe-prd-llm-training-job.yaml").read_text())
    assert "podTemplate" not in doc["spec"]
    name = _create(k8s_api, namespace, doc, tag, hold=True)  # adds only a nodeSelector and an annotation
    wl = eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and _cond(w, "PodsReady").get("status") == "True" and w,
        "the PRD's llm-training-job running",
    )
    assert wl["status"]["runtime"] == "torch-distributed"
    assert "runtime torch-distributed" in _cond(wl, "Admitted")["message"]
    assert wl["status"]["nodes"] == node
    (pod,) = _pods(k8s_api, namespace, name)
    (trainer,) = pod.spec.containers
    assert trainer.image == "nvcr.io/nvidia/pytorch:25.12-py3"
    assert trainer.resources.limits == {"nvidia.com/gpu": "8"}
    env = {e.name: e.value for e in trainer.env}
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("1", "8")
    assert pod.spec.node_selector == tag  # the workload's own template fields, laid over the runtime's
    # `kgwe submit --dry-run=client -o yaml --policy` planned, offline, exactly what the controller created
    from kgwe.fleet.submit_cmd import planned_yaml

    live = client.CustomObjectsApi(k8s_api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    body = {k: live[k] for k in ("apiVersion", "kind", "spec")}
    body["metadata"] = {"name": name, "namespace": namespace}
    planned = {
        f"{o['kind']}/{o['metadata']['name']}": o
        for o in yaml.safe_load_all(planned_yaml([body], str(stack["repo"]), None))
    }
    job = client.BatchV1Api(k8s_api).read_namespaced_job(f"{name}-r0-worker", namespace)
    assert sorted(planned) == [f"Job/{name}-r0-worker", f"Service/{name}"]
    want = planned[f"Job/{name}-r0-worker"]["spec"]["template"]
    got = client.ApiClient().sanitize_for_serialization(job.spec.template)
    assert got["metadata"]["labels"] == {
        **want["metadata"]["labels"],
        "batch.kubernetes.io/controller-uid": job.metadata.uid,
        "batch.kubernetes.io/job-name": job.metadata.name,
        "controller-uid": job.metadata.uid,
        "job-name": job.metadata.name,
    }
    assert got["metadata"]["annotations"] == want["metadata"]["annotations"]
    for field in ("image", "command", "env", "ports", "resources", "volumeMounts"):
        assert got["spec"]["containers"][0][field] == want["spec"]["containers"][0][field], field
    for field in ("nodeSelector", "schedulerName", "subdomain", "restartPolicy", "volumes"):
        assert got["spec"][field] == want["spec"][field], field


def test_a_spec_edit_the_running_job_cannot_take_is_one_event(stack, k8s_api, namespace, gpu_node):
    """The runtime changes under a running workload (a new image), then the workload is edited: its Job's
    pod template cannot change, so the reconciler says so once and goes on; it never retries in a loop."""
    tag = _tag()
    gpu_node("DGX-A100", labels=tag)
    doc = yaml.safe_load((EXAMPLES / "kgwe-prd-llm-training-job.yaml").read_text())
    doc["metadata"] = {"name": "runtime-moved"}
    name = _create(k8s_api, namespace, doc, tag, hold=True)
    eventually(lambda: _get(k8s_api, namespace, name).get("status", {}).get("phase") == "Running", "running")
    core, policy_namespace = client.CoreV1Api(k8s_api), stack["policy_namespace"]
    cm = core.read_namespaced_config_map("kgwe-runtimes", policy_namespace)
    cm.data["runtimes.json"] = cm.data["runtimes.json"].replace("pytorch:25.12-py3", "pytorch:26.01-py3")
    core.replace_namespaced_config_map("kgwe-runtimes", policy_namespace, cm)
    custom = client.CustomObjectsApi(k8s_api)
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": {"team": "nlp"}})
    eventually(lambda: _events(k8s_api, namespace, name, "SpecNotApplied"), "SpecNotApplied")
    looked_at_again(stack)
    (event,) = _events(k8s_api, namespace, name, "SpecNotApplied")
    assert "the API server refuses the change" in event.message and "immutable" in event.message
    wl = _get(k8s_api, namespace, name)
    assert wl["status"]["observedGeneration"] == wl["metadata"]["generation"]
    assert wl["status"]["phase"] == "Running"
    (pod,) = _pods(k8s_api, namespace, name)
    assert pod.spec.containers[0].image == "nvcr.io/nvidia/pytorch:25.12-py3"  # the run keeps its objects


def _events(k8s_api, namespace: str, name: str, reason: str) -> list:
    core = client.CoreV1Api(k8s_api)
    items = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [e for e in items if e.reason == reason]


def test_a_template_of_the_wrong_type_is_one_condition_not_a_loop(stack, k8s_api, namespace, gpu_node):
    """`affinity: "x"` passes the CRD (podTemplate preserves unknown fields); the reconciler says why once
    and creates nothing, however often it looks again (the stack resyncs every 5 s)."""
    tag = _tag()
    gpu_node("DGX-A100", labels=tag)
    doc = yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text())
    doc["metadata"] = {"name": "bad-affinity"}
    doc["spec"]["podTemplate"]["spec"]["affinity"] = "x"
    name = _create(k8s_api, namespace, doc, tag)
    wl = eventually(
        lambda: (
            (w := _get(k8s_api, namespace, name))
            and _cond(w, "Admitted").get("reason") == "InvalidSpec"
            and w
        ),
        "refused as InvalidSpec",
    )
    assert _cond(wl, "Admitted")["message"].startswith(
        "spec.podTemplate.spec.affinity: expected a map (Affinity), got a string"
    )
    looked_at_again(stack)
    assert len(_events(k8s_api, namespace, name, "InvalidSpec")) == 1
    failed = stack["reconciler"].metrics.failed.labels("InvalidSpec")._value.get()
    assert failed >= 1
    assert _get(k8s_api, namespace, name)["metadata"]["resourceVersion"] == wl["metadata"]["resourceVersion"]
    assert not client.BatchV1Api(k8s_api).list_namespaced_job(namespace).items


def test_a_template_the_api_server_refuses_creates_nothing(stack, k8s_api, namespace, gpu_node):
    """A value only the API server's own validation catches (a port above 65535): every child is dry-run
    first, so neither the Service nor the Job exists, and the refusal is said once."""
    tag = _tag()
    gpu_node("DGX-A100", labels=tag)
    doc = yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text())
    doc["metadata"] = {"name": "bad-port"}
    doc["spec"]["podTemplate"]["spec"]["containers"][0]["ports"] = [{"containerPort": 70000}]
    name = _create(k8s_api, namespace, doc, tag)
    wl = eventually(
        lambda: (
            (w := _get(k8s_api, namespace, name))
            and _cond(w, "Admitted").get("reason") == "InvalidPodTemplate"
            and w
        ),
        "refused as InvalidPodTemplate",
    )
    message = _cond(wl, "Admitted")["message"]
    assert "the API server refuses Job/bad-port-r0-worker" in message and "containerPort" in message
    looked_at_again(stack)
    assert len(_events(k8s_api, namespace, name, "InvalidPodTemplate")) == 1
    assert not client.BatchV1Api(k8s_api).list_namespaced_job(namespace).items
    with pytest.raises(ApiException):
        client.CoreV1Api(k8s_api).read_namespaced_service(name, namespace)


def test_impossible_request_is_refused_with_the_field(stack, k8s_api, namespace, gpu_node):
    tag = _tag()
    gpu_node("DGX-A100", labels=tag)
    doc = yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text())
    doc["metadata"] = {"name": "too-big"}
    doc["spec"]["gpuRequirements"]["count"] = 9
    doc["spec"]["distributedConfig"].pop("worldSize")  # 8 would no longer match 1 pod × 9 GPUs
    name = _create(k8s_api, namespace, doc, tag)
    wl = eventually(
        lambda: (w := _get(k8s_api, namespace, name)) and _cond(w, "Admitted").get("status") == "False" and w,
        "refused",
    )
    assert _cond(wl, "Admitted")["reason"] == "Unschedulable"
    assert _cond(wl, "Admitted")["message"].startswith("spec.gpuRequirements.count: 9 GPUs in one pod")
    with pytest.raises(ApiException):
        client.BatchV1Api(k8s_api).read_namespaced_job(f"{name}-r0-worker", namespace)


def _forbidden(action: Callable[[], object]) -> None:
    with pytest.raises(ApiException) as err:
        action()
    assert err.value.status == 403


def test_reconciler_runs_as_the_controllers_service_account(
    control_plane, k8s_api, namespace, gpu_node, controller_account, tmp_path
):
    """The reconciler's real code, as kgwe-controller with only deploy/'s RBAC, runs a gang (PodGroup, one
    Indexed Job per role, headless Service, status, Events); it cannot do more than its job needs."""
    tag = _tag()
    for _ in range(2):
        gpu_node("DGX-H100", labels=tag)
    sa = controller_account
    opt_in(k8s_api, namespace)
    with kgwe_stack(control_plane, k8s_api, "kgwe-system", tmp_path, reconciler_api=sa) as parts:
        _DUMP[:] = [lambda: _dump(k8s_api, namespace)]
        doc = yaml.safe_load((EXAMPLES / "distributed-16gpu.yaml").read_text())
        name = _create(k8s_api, namespace, doc, tag, hold=True)
        eventually(lambda: len(_bound(k8s_api, namespace, name)) == 2, "the gang placed as the controller")
        eventually(
            lambda: _cond(_get(k8s_api, namespace, name), "PodsScheduled").get("status") == "True",
            "status written as the controller",
        )
        pg = client.CustomObjectsApi(k8s_api)
        assert pg.list_namespaced_custom_object("scheduling.k8s.io", "v1beta1", namespace, "podgroups")[
            "items"
        ]
        assert client.CoreV1Api(k8s_api).read_namespaced_service(name, namespace)
        events = client.CoreV1Api(k8s_api).list_namespaced_event(namespace).items
        assert any(e.involved_object.name == name and e.source.component for e in events)
        assert parts["reconciler"].cluster.api_client is sa
    core, custom = client.CoreV1Api(sa), client.CustomObjectsApi(sa)
    _forbidden(lambda: core.list_secret_for_all_namespaces())
    # pods it may delete (a Kueue run's, which it makes) only where GPUWorkloads run
    _forbidden(lambda: core.delete_namespaced_pod("x", "kube-system"))
    stray = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    _forbidden(lambda: core.create_namespaced_pod("default", stray))
    _forbidden(lambda: client.AppsV1Api(sa).delete_namespaced_deployment("x", namespace))
    _forbidden(lambda: custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))
    _forbidden(lambda: custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc))
