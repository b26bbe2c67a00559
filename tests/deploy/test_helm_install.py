"""The README's `helm install` command on a real control plane of its own (kube-controller-manager makes the
Deployments' and the DaemonSet's pods, kwok runs them), then `helm upgrade` with changed values,
`helm uninstall` (CRDs kept); every pod admitted under Pod Security "restricted" (the agent in the GPU
Operator's privileged namespace); what the notes say when the GPU Operator is missing; and every manifest
of the chart accepted by the real apiserver (dry-run). Pods running for real: tests/e2e."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from kgwe.cluster.client import ensure_namespace
from kgwe.localcluster import gpunodes
from tests.harness.chart import CHART_DIR, helm
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.usefixtures("chart")  # every test runs helm

NS = "kgwe-system"
CRDS = ("policyrepositories.kgwe.nvidia.io", "gpuworkloads.kgwe.nvidia.io")
# The README's command, with the chart's path for kgwe/kgwe.
SEED = (
    "install", "kgwe", str(CHART_DIR), "--namespace", "kgwe-system", "--create-namespace",
    "--set", "scheduler.enabled=true", "--set", "migController.enabled=true",
)  # fmt: skip


@pytest.fixture(scope="module")
def helm_cluster(
    tmp_path_factory: pytest.TempPathFactory, new_control_plane: Callable[..., Any]
) -> Iterator[SimpleNamespace]:
    """A control plane for this module alone: a Helm release owns cluster-wide names (CRDs, ClusterRoles)."""
    home = tmp_path_factory.mktemp("helm-home")
    with new_control_plane() as cp:
        api = cp.api_client()
        gpunodes.ensure_gpu_operator_objects(api)  # the controller's MIG Role and the agent go there
        nodes = [f"helm-gpu-{i}" for i in range(2)]
        for name in nodes:
            gpunodes.create_gpu_node(api, name, "DGX-H100")
        gpunodes.wait_nodes_ready(api, nodes, timeout_seconds=120)
        env = {
            "KUBECONFIG": str(cp.kubeconfig_path),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        yield SimpleNamespace(cp=cp, api=api, env=env, nodes=nodes)


def _helm(helm_cluster: SimpleNamespace, *args: str) -> str:
    return helm(*args, env=helm_cluster.env).stdout


def _ready_pods(api: client.ApiClient, component: str, namespace: str = NS) -> int:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"app.kubernetes.io/component={component}"
    )
    return sum(
        1
        for p in pods.items
        if p.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    )


def _crd_names(api: client.ApiClient) -> set[str]:
    return {c.metadata.name for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items}


def test_controller_status_says_when_the_crds_are_missing(helm_cluster, tmp_path):
    """crds.install=false on a cluster without the CRDs: the controller's /readyz says what is missing."""
    from kgwe.reconcile.controller import Controller

    assert not set(CRDS) & _crd_names(helm_cluster.api), "this check needs a cluster without KGWE's CRDs"
    controller = Controller(
        helm_cluster.api, NS, cache_dir=tmp_path, listen=None, leader_election=False, workloads=False
    )
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        _, _, body = wait_for("the watch to find no CRD", lambda: (r := controller._readyz())[0] == 503 and r)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert b"policyrepositories.kgwe.nvidia.io is not installed" in body
    notes = _helm(
        helm_cluster, "install", "kgwe", str(CHART_DIR), "--namespace", NS, "--set", "crds.install=false",
        "--dry-run=server",
    )  # fmt: skip
    assert "CustomResourceDefinition" not in notes.split("NOTES:")[0]
    assert (
        "WARNING: crds.install=false and the CRD policyrepositories.kgwe.nvidia.io is not on this cluster"
        in notes
    )


def test_seed_install_upgrade_uninstall(helm_cluster):
    api, apps = helm_cluster.api, client.AppsV1Api(helm_cluster.api)
    out = _helm(helm_cluster, *SEED, "--wait", "--timeout", "8m")
    assert "STATUS: deployed" in out and "Next steps" in out
    notes = out.split("NOTES:", 1)[1]  # what is really served
    assert "extender    in each kgwe-scheduler pod, http://127.0.0.1:8888 (that pod's loopback only)" in notes
    assert "scheduler   kgwe-scheduler (registry.k8s.io/kube-scheduler:v1.37.2)" in notes
    # this 1.37 API server serves MutatingAdmissionPolicy: the chart routes GPU pods with it, no webhook
    assert "routing     MutatingAdmissionPolicy kgwe-scheduling (run by the API server" in notes
    assert "webhook     kgwe-webhook" not in notes and "mutate-pods" not in notes
    assert "WARNING" not in notes and ":8080" not in notes.split("Next steps")[0]
    for component, want in (
        ("controller", 2),
        ("scheduler", 2),
        ("webhook", 0),
    ):
        assert _ready_pods(api, component) == want, f"{component}: {want} Ready pod(s) expected"
    admission = client.AdmissionregistrationV1Api(api)
    assert admission.read_mutating_admission_policy("kgwe-scheduling").spec.failure_policy == "Fail"
    assert _routed(api) == "kgwe-scheduler"
    assert _ready_pods(api, "agent", "gpu-operator") == len(helm_cluster.nodes)
    assert set(CRDS) <= _crd_names(api)
    releases = json.loads(_helm(helm_cluster, "list", "--namespace", NS, "--output", "json"))
    assert [(r["name"], r["status"]) for r in releases] == [("kgwe", "deployed")]

    _helm(
        helm_cluster, "upgrade", "kgwe", str(CHART_DIR), "--namespace", NS, "--reuse-values",
        "--set", "scheduler.replicas=3", "--set", "agent.enabled=false",
        "--set", "webhook.routeWith=Webhook", "--wait", "--timeout", "8m",
    )  # fmt: skip
    assert apps.read_namespaced_deployment("kgwe-scheduler", NS).spec.replicas == 3
    assert _ready_pods(api, "scheduler") == 3
    # routed by the webhook server instead (older clusters' way): the policy is gone, the webhook is there
    assert _ready_pods(api, "webhook") == 2
    with pytest.raises(ApiException) as gone:
        admission.read_mutating_admission_policy("kgwe-scheduling")
    assert gone.value.status == 404
    assert admission.read_mutating_webhook_configuration("kgwe-scheduling").webhooks
    with pytest.raises(ApiException) as gone:
        apps.read_namespaced_daemon_set("kgwe-agent", "gpu-operator")
    assert gone.value.status == 404
    history = json.loads(_helm(helm_cluster, "history", "kgwe", "--namespace", NS, "--output", "json"))
    assert [h["revision"] for h in history] == [1, 2]

    _helm(helm_cluster, "uninstall", "kgwe", "--namespace", NS, "--wait", "--timeout", "5m")
    assert not apps.list_namespaced_deployment(NS).items
    assert set(CRDS) <= _crd_names(api), "crds.keep (default) keeps the CRDs and every custom resource"


def _routed(api: client.ApiClient) -> str:
    """The schedulerName a GPU pod of an opted-in namespace is created with (server-side dry run)."""
    ensure_namespace(api, "routed")
    core = client.CoreV1Api(api)
    core.patch_namespace("routed", {"metadata": {"labels": {"kgwe.nvidia.io/scheduling": "enabled"}}})
    pod = {
        "metadata": {"name": "gpu"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        },
    }
    deadline = time.monotonic() + 60
    while True:  # the namespace's default ServiceAccount and the policy's informer arrive in their time
        try:
            name = core.create_namespaced_pod("routed", pod, dry_run="All").spec.scheduler_name
        except ApiException as exc:
            if exc.status not in (403, 404) or time.monotonic() > deadline:
                raise
            name = ""
        if name == "kgwe-scheduler" or time.monotonic() > deadline:
            return str(name)
        time.sleep(0.5)


def _label_namespace(api: client.ApiClient, name: str, level: str) -> None:
    ensure_namespace(api, name)
    labels = {f"pod-security.kubernetes.io/{mode}": level for mode in ("enforce", "warn", "audit")}
    client.CoreV1Api(api).patch_namespace(name, {"metadata": {"labels": labels}})


def _refusals(api: client.ApiClient, namespace: str, kind: str, name: str) -> list[str]:
    """The FailedCreate events of a workload (what `kubectl describe` shows)."""
    events = (
        client.CoreV1Api(api)
        .list_namespaced_event(namespace, field_selector=f"involvedObject.name={name},reason=FailedCreate")
        .items
    )
    return [e.message for e in events if e.involved_object.kind == kind]


def test_every_pod_is_admitted_under_pod_security_restricted_and_the_agent_beside_the_gpu_operator(
    helm_cluster,
):
    """The release namespace enforces "restricted", the GPU Operator's "privileged" (as its own hostPath and
    privileged pods need): the install comes up. The agent in the restricted namespace would be refused."""
    api = helm_cluster.api
    _label_namespace(api, "kgwe-restricted", "restricted")
    _label_namespace(api, "gpu-operator", "privileged")
    install = (
        "install", "kgwe", str(CHART_DIR), "--namespace", "kgwe-restricted",
        "--set", "scheduler.enabled=true", "--set", "migController.enabled=true",
        "--set", "crds.install=false",  # kept by the release before, which owns them
    )  # fmt: skip
    _helm(helm_cluster, *install, "--wait", "--timeout", "5m")
    try:
        for component, want in (("controller", 2), ("scheduler", 2)):
            assert _ready_pods(api, component, "kgwe-restricted") == want, component
        assert _ready_pods(api, "agent", "gpu-operator") == len(helm_cluster.nodes)
        assert not [m for m in _all_refusals(api, "kgwe-restricted") if "PodSecurity" in m]
        # the check can fail: the agent (hostPath) in the restricted namespace is refused, and says why
        _helm(
            helm_cluster, "upgrade", "kgwe", str(CHART_DIR), "--namespace", "kgwe-restricted",
            "--reuse-values", "--set", "gpuOperator.namespace=kgwe-restricted",
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not (refused := _refusals(api, "kgwe-restricted", "DaemonSet", "kgwe-agent")):
            assert time.monotonic() < deadline, "the agent in a restricted namespace should be refused"
            time.sleep(0.5)
        assert any('violates PodSecurity "restricted' in m and "hostPath" in m for m in refused), refused
    finally:
        _helm(
            helm_cluster, "uninstall", "kgwe", "--namespace", "kgwe-restricted", "--wait", "--timeout", "5m"
        )


def _all_refusals(api: client.ApiClient, namespace: str) -> list[str]:
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="reason=FailedCreate")
    return [e.message for e in events.items]


def test_without_the_gpu_operator_the_install_says_what_to_do(helm_cluster):
    """No GPU Operator namespace (or runtime class) yet: the install still succeeds, leaves out what would
    fail, and its notes say what is missing and what to run."""
    out = _helm(
        helm_cluster, *SEED, "--set", "gpuOperator.namespace=no-operator-here", "--dry-run=server",
    )  # fmt: skip
    notes = out.split("NOTES:", 1)[1]
    assert "WARNING: the namespace no-operator-here (gpuOperator.namespace) does not exist" in notes
    assert "helm upgrade kgwe <this chart> --namespace kgwe-system --reset-then-reuse-values" in notes
    assert "--reuse-values would drop new defaults" in notes and "job/kgwe-pre-delete" in notes
    manifest = out.split("MANIFEST:", 1)[1].split("NOTES:", 1)[0]
    objs = [d for d in yaml.safe_load_all(manifest) if d]
    assert not [d for d in objs if d["kind"] == "DaemonSet"]
    assert not [d for d in objs if d["metadata"].get("namespace") == "no-operator-here"]
    out = _helm(helm_cluster, *SEED, "--set", "agent.runtimeClassName=gpu-runtime", "--dry-run=server")
    assert "WARNING: there is no RuntimeClass gpu-runtime" in out.split("NOTES:", 1)[1]


def test_every_manifest_is_accepted_by_the_apiserver(helm_cluster):
    """All components, the hooks and the PolicyRepository their Job applies (ci/full-values.yaml): server-side
    dry-run, after the CRDs."""
    docs = [
        d
        for d in yaml.safe_load_all(
            helm(
                "template",
                "kgwe",
                str(CHART_DIR),
                "--namespace",
                NS,
                "-f",
                str(CHART_DIR / "ci" / "full-values.yaml"),
            ).stdout
        )
        if d
    ]
    dyn = dynamic.DynamicClient(helm_cluster.api)
    ensure_namespace(helm_cluster.api, NS)
    ensure_namespace(helm_cluster.api, "nvidia-gpu-operator")  # full-values.yaml's gpuOperator.namespace
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert {c["metadata"]["name"] for c in crds} == set(CRDS)
    for doc in crds:  # the CRDs for real (they may be kept from the install test), then wait until served
        dyn.server_side_apply(
            dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]),
            body=doc, field_manager="dry-run-test", force_conflicts=True,
        )  # fmt: skip
    from tests.harness.crds import install_crds

    install_crds(helm_cluster.api, crds)
    dyn = dynamic.DynamicClient(helm_cluster.api)  # rediscover the new APIs
    accepted = []
    # the PolicyRepository the post-install hook Job applies, from its arguments
    apply_job = next(
        d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "kgwe-policy-repository"
    )
    docs.append(json.loads(apply_job["spec"]["template"]["spec"]["containers"][0]["args"][-1]))
    for doc in docs:
        if doc["kind"] == "CustomResourceDefinition":
            continue
        resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        dyn.server_side_apply(
            resource,
            body=doc,
            namespace=doc["metadata"].get("namespace"),
            field_manager="dry-run-test",
            dry_run="All",
            field_validation="Strict",
        )
        accepted.append(f"{doc['kind']}/{doc['metadata']['name']}")
    assert "PolicyRepository/gpu-policy" in accepted and "Deployment/kgwe-scheduler" in accepted
    print(json.dumps({"dry_run_accepted_objects": len(accepted) + len(crds)}))
