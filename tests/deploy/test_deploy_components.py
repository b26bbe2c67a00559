"""deploy/'s extender, agent and the controller's certificate keeper: applied to the real API server, their
real code run as their ServiceAccounts (impersonated), so their RBAC is proven enough by the code itself and
narrow by refused extra verbs."""

from __future__ import annotations

import pytest
import yaml
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


def _as(
    api: client.ApiClient, sa: str, node: str | None = None, namespace: str = "kgwe-system"
) -> client.ApiClient:
    """The API as ServiceAccount `sa`; with `node`, as a pod's bound token on that node carries it."""
    impersonated = client.ApiClient(api.configuration)
    impersonated.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:{sa}")
    if node is not None:
        impersonated.set_default_header("Impersonate-Extra-authentication.kubernetes.io%2fnode-name", node)
    return impersonated


def _forbidden(action) -> None:
    with pytest.raises(ApiException) as err:
        action()
    assert err.value.status == 403


@pytest.fixture(scope="module")
def applied(k8s_api):

    from kgwe.localcluster.gpunodes import ensure_gpu_operator_objects

    ensure_gpu_operator_objects(k8s_api)  # the controller's Role for the mig-parted ConfigMap, the agent
    apply_docs(k8s_api, _docs(), "deploy-test")
    return k8s_api


def test_extender_and_agent_are_in_the_base():
    kinds = {(d["kind"], d["metadata"]["name"]) for d in _docs()}
    assert {
        ("Service", "kgwe-extender"),
        ("DaemonSet", "kgwe-agent"),
        ("Deployment", "kgwe-scheduler"),
    } <= kinds
    assert ("Deployment", "kgwe-extender") not in kinds  # a container of each kgwe-scheduler pod


def test_the_scheduler_config_calls_the_extender_in_the_schedulers_own_pod():
    from kgwe.policy import load_repository
    from kgwe.render import render_repository
    from kgwe.render.render import DEFAULT_EXTENDER_URL
    from kgwe.resources import sample_repo_dir

    objs = render_repository(load_repository(sample_repo_dir()))
    config = next(o for o in objs if o["metadata"]["name"] == "kgwe-scheduler-config")
    (extender,) = yaml.safe_load(next(iter(config["data"].values())))["extenders"]
    assert extender["urlPrefix"] == DEFAULT_EXTENDER_URL and "tlsConfig" not in extender
    controller = next(
        d for d in _docs() if d["kind"] == "Deployment" and d["metadata"]["name"] == "kgwe-controller"
    )
    assert (
        f"--extender-url={DEFAULT_EXTENDER_URL}"
        in controller["spec"]["template"]["spec"]["containers"][0]["args"]
    )


def test_extender_index_syncs_as_its_service_account_and_can_do_nothing_else(applied, gpu_node):
    from kgwe.extender.engine import Engine
    from kgwe.extender.index import ClusterIndex

    node = gpu_node("DGX-H100")
    sa_api = _as(applied, "kgwe-scheduler")  # the extender runs in kgwe-scheduler's pods
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
    _forbidden(lambda: core.create_namespaced_config_map("kgwe-system", {"metadata": {"name": "x"}}))
    _forbidden(
        lambda: client.AppsV1Api(sa_api).patch_namespaced_deployment("kgwe-controller", "kgwe-system", {})
    )


def test_agent_publishes_as_its_service_account_and_can_do_nothing_else(applied, gpu_node):
    import argparse

    from kgwe.agent import agent_cmd
    from kgwe.topology.annotation import ANNOTATION_KEY

    node = gpu_node("DGX-1-V100")
    other = gpu_node("DGX-1-V100")
    core = client.CoreV1Api(_as(applied, "kgwe-agent", node=node, namespace="gpu-operator"))
    client.CoreV1Api(applied).patch_node(node, {"metadata": {"annotations": {ANNOTATION_KEY: None}}})
    args = argparse.Namespace(fake_nvml="DGX-1-V100", node_name=node, pod_resources_socket="")
    found = agent_cmd.observe(args)
    assert agent_cmd.publish(core, node, found) is not None  # read + patch of its Node are enough
    assert ANNOTATION_KEY in client.CoreV1Api(applied).read_node(node).metadata.annotations
    _forbidden(lambda: core.list_pod_for_all_namespaces())
    _forbidden(lambda: core.delete_node(node))
    _forbidden(lambda: core.patch_node(other, {"metadata": {"labels": {"x": "y"}}}))  # not its node
    _forbidden(lambda: core.read_namespaced_secret("x", "kgwe-system"))
    _forbidden(lambda: core.read_namespaced_secret("x", "gpu-operator"))


def test_the_controller_keeps_its_certificates_as_its_service_account_and_touches_no_other(applied):
    """The certificate keeper with the chart's RBAC: issues into its own Secrets, patches the caBundle of
    kgwe-scheduling; another Secret or webhook configuration is out of reach."""
    from kgwe.reconcile.certificates import CertificateKeeper
    from kgwe.vocab import CA_SECRET, WEBHOOK_CONFIGURATION, WEBHOOK_TLS_SECRET

    sa_api = _as(applied, "kgwe-controller")
    keeper = CertificateKeeper(sa_api, "kgwe-system", ["webhook"])
    done = keeper.sync()
    assert set(done.written) == {CA_SECRET, WEBHOOK_TLS_SECRET} and done.ca_bundle_patched
    assert done.rolled == ("kgwe-webhook",)  # its pods mount the new Secret at once
    bundle = client.CoreV1Api(applied).read_namespaced_secret(CA_SECRET, "kgwe-system").data["ca.crt"]
    admin = client.AdmissionregistrationV1Api(applied)
    config = admin.read_mutating_webhook_configuration(WEBHOOK_CONFIGURATION)
    assert config.webhooks[0].client_config.ca_bundle == bundle  # both base64 of the PEM bundle
    core = client.CoreV1Api(sa_api)
    _forbidden(lambda: core.patch_namespaced_secret("someone-elses", "kgwe-system", {"data": {}}))
    _forbidden(lambda: core.patch_namespaced_secret(WEBHOOK_TLS_SECRET, "default", {"data": {}}))
    apps = client.AppsV1Api(sa_api)
    _forbidden(lambda: apps.patch_namespaced_deployment("kgwe-controller", "kgwe-system", {"metadata": {}}))
    admission = client.AdmissionregistrationV1Api(sa_api)
    _forbidden(lambda: admission.patch_mutating_webhook_configuration("another-webhook", {"metadata": {}}))
