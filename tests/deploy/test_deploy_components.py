"""deploy/'s extender and agent: applied to the real API server, their real code run as their ServiceAccounts
(impersonated), so their RBAC is proven enough by the code itself and narrow by refused extra verbs."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.resources import deploy_dir
from tests.harness.deployed import apply_docs

pytestmark = pytest.mark.cluster


def _docs() -> list[dict]:
    import yaml

    kustomization = yaml.safe_load((deploy_dir() / "kustomization.yaml").read_text())
    docs = []
    for rel in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((deploy_dir() / rel).read_text()) if d]
    return docs


def _as(api: client.ApiClient, sa: str, node: str | None = None) -> client.ApiClient:
    """The API as ServiceAccount `sa`; with `node`, as a pod's bound token on that node carries it."""
    impersonated = client.ApiClient(api.configuration)
    impersonated.set_default_header("Impersonate-User", f"system:serviceaccount:kgwe-system:{sa}")
    if node is not None:
        impersonated.set_default_header("Impersonate-Extra-authentication.kubernetes.io%2fnode-name", node)
    return impersonated


def _forbidden(action) -> None:
    with pytest.raises(ApiException) as err:
        action()
    assert err.value.status == 403


@pytest.fixture(scope="module")
def applied(k8s_api):
    from kgwe.cluster.client import ensure_namespace

    ensure_namespace(k8s_api, "gpu-operator")  # holds the controller's Role for the mig-parted ConfigMap
    apply_docs(k8s_api, _docs(), "deploy-test")
    return k8s_api


def test_extender_and_agent_are_in_the_base():
    kinds = {(d["kind"], d["metadata"]["name"]) for d in _docs()}
    assert {
        ("Deployment", "kgwe-extender"),
        ("Service", "kgwe-extender"),
        ("PodDisruptionBudget", "kgwe-extender"),
        ("DaemonSet", "kgwe-agent"),
    } <= kinds


def test_the_scheduler_config_points_at_the_extender_service():
    from kgwe.policy import load_repository
    from kgwe.render import render_repository
    from kgwe.resources import sample_repo_dir

    objs = render_repository(load_repository(sample_repo_dir()))
    config = next(o for o in objs if o["metadata"]["name"] == "kgwe-scheduler-config")
    service = next(d for d in _docs() if d["kind"] == "Service" and d["metadata"]["name"] == "kgwe-extender")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "api")
    url = f"https://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{port}"
    text = next(iter(config["data"].values()))
    assert url in text and "certFile: /etc/kgwe/extender-client/tls.crt" in text
    controller = next(
        d for d in _docs() if d["kind"] == "Deployment" and d["metadata"]["name"] == "kgwe-controller"
    )
    args = controller["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--extender-url={url}" in args and "--extender-client-cert-dir=/etc/kgwe/extender-client" in args
    # replicas keep their own assumed pods: the active scheduler must keep talking to one of them
    assert service["spec"]["sessionAffinity"] == "ClientIP"


def test_extender_index_syncs_as_its_service_account_and_can_do_nothing_else(applied, gpu_node):
    from kgwe.extender.engine import Engine
    from kgwe.extender.index import ClusterIndex

    node = gpu_node("DGX-H100")
    sa_api = _as(applied, "kgwe-extender")
    engine = Engine()
    index = ClusterIndex(engine, namespace="kgwe-system", api_client=sa_api)
    index.start()
    try:
        assert index.wait_ready(60), "the extender never synced as its ServiceAccount"
        assert node in index.bases
        assert index.profile_error is None
    finally:
        index.stop()
    core = client.CoreV1Api(sa_api)
    _forbidden(lambda: core.patch_node(node, {"metadata": {"labels": {"x": "y"}}}))
    _forbidden(lambda: core.list_secret_for_all_namespaces())
    _forbidden(lambda: core.list_namespaced_config_map("default"))
    _forbidden(lambda: core.delete_namespaced_pod("x", "kgwe-system"))


def test_agent_publishes_as_its_service_account_and_can_do_nothing_else(applied, gpu_node):
    import argparse

    from kgwe.agent import agent_cmd
    from kgwe.topology.annotation import ANNOTATION_KEY

    node = gpu_node("DGX-1-V100")
    other = gpu_node("DGX-1-V100")
    core = client.CoreV1Api(_as(applied, "kgwe-agent", node=node))
    client.CoreV1Api(applied).patch_node(node, {"metadata": {"annotations": {ANNOTATION_KEY: None}}})
    args = argparse.Namespace(fake_nvml="DGX-1-V100", node_name=node, pod_resources_socket="")
    found = agent_cmd.observe(args)
    assert agent_cmd.publish(core, node, found) is not None  # read + patch of its Node are enough
    assert ANNOTATION_KEY in client.CoreV1Api(applied).read_node(node).metadata.annotations
    _forbidden(lambda: core.list_pod_for_all_namespaces())
    _forbidden(lambda: core.delete_node(node))
    _forbidden(lambda: core.patch_node(other, {"metadata": {"labels": {"x": "y"}}}))  # not its node
    _forbidden(lambda: core.read_namespaced_secret("x", "kgwe-system"))
