"""The README's `helm install` command on a real control plane of its own (kube-controller-manager makes the
Deployments' and the DaemonSet's pods, kwok runs them), then `helm upgrade` with changed values,
`helm uninstall` (CRDs kept), and every manifest of the chart accepted by the real apiserver (dry-run)."""

from __future__ import annotations

import json
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
        ensure_namespace(api, "gpu-operator")  # the GPU Operator's namespace holds the controller's MIG Role
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


def _ready_pods(api: client.ApiClient, component: str) -> int:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        NS, label_selector=f"app.kubernetes.io/component={component}"
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
    controller = Controller(helm_cluster.api, NS, cache_dir=tmp_path, listen=None, leader_election=False)
    controller.tick()
    status, _, body = controller._readyz()
    assert status == 503 and b"policyrepositories.kgwe.nvidia.io is not installed" in body
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
    assert "STATUS: deployed" in out and "kgwe-scheduler" in out  # NOTES name what was installed
    assert "Next steps" in out
    for component, want in (
        ("controller", 2),
        ("extender", 2),
        ("scheduler", 2),
        ("webhook", 2),
        ("agent", len(helm_cluster.nodes)),
    ):
        assert _ready_pods(api, component) == want, f"{component}: {want} Ready pod(s) expected"
    assert set(CRDS) <= _crd_names(api)
    releases = json.loads(_helm(helm_cluster, "list", "--namespace", NS, "--output", "json"))
    assert [(r["name"], r["status"]) for r in releases] == [("kgwe", "deployed")]

    _helm(
        helm_cluster, "upgrade", "kgwe", str(CHART_DIR), "--namespace", NS, "--reuse-values",
        "--set", "extender.replicas=3", "--set", "agent.enabled=false", "--wait", "--timeout", "8m",
    )  # fmt: skip
    assert apps.read_namespaced_deployment("kgwe-extender", NS).spec.replicas == 3
    assert _ready_pods(api, "extender") == 3
    with pytest.raises(ApiException) as gone:
        apps.read_namespaced_daemon_set("kgwe-agent", NS)
    assert gone.value.status == 404
    history = json.loads(_helm(helm_cluster, "history", "kgwe", "--namespace", NS, "--output", "json"))
    assert [h["revision"] for h in history] == [1, 2]

    _helm(helm_cluster, "uninstall", "kgwe", "--namespace", NS, "--wait", "--timeout", "5m")
    assert not apps.list_namespaced_deployment(NS).items
    assert set(CRDS) <= _crd_names(api), "crds.keep (default) keeps the CRDs and every custom resource"


def test_every_manifest_is_accepted_by_the_apiserver(helm_cluster):
    """All components and a PolicyRepository (ci/full-values.yaml): server-side dry-run, after the CRDs."""
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
