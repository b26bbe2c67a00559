"""The agent may patch only its own Node: RBAC grants nodes patch, and deploy/'s ValidatingAdmissionPolicy
on the node-name claim of its ServiceAccount token narrows it to one node. Against the real API server,
impersonating the agent's ServiceAccount with that claim (what a bound token of a pod on the node carries)."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from kgwe.cluster.client import ensure_namespace
from kgwe.resources import deploy_dir
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster
NODE_NAME_EXTRA = "Impersonate-Extra-authentication.kubernetes.io%2fnode-name"


def as_agent(api: client.ApiClient, node: str | None) -> client.CoreV1Api:
    impersonated = client.ApiClient(api.configuration)
    # the agent runs beside the GPU Operator
    impersonated.set_default_header("Impersonate-User", "system:serviceaccount:gpu-operator:kgwe-agent")
    if node is not None:
        impersonated.set_default_header(NODE_NAME_EXTRA, node)
    return client.CoreV1Api(impersonated)


def refused(action) -> str:
    with pytest.raises(ApiException) as err:
        action()
    assert err.value.status in (403, 422), err.value
    return str(err.value.body)


def test_the_agent_patches_only_its_own_node(k8s_api, gpu_node) -> None:
    ensure_namespace(k8s_api, "gpu-operator")  # the agent's namespace
    dyn = dynamic.DynamicClient(k8s_api)
    for doc in yaml.safe_load_all((deploy_dir() / "agent" / "agent.yaml").read_text()):
        if doc and doc["kind"] != "DaemonSet":
            resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            dyn.server_side_apply(
                resource,
                body=doc,
                namespace=doc["metadata"].get("namespace"),
                field_manager="rbac-test",
                force_conflicts=True,
            )
    mine, other = gpu_node("DGX-H100"), gpu_node("DGX-H100")
    label = {"metadata": {"labels": {"kgwe.nvidia.io/probe": "x"}}}

    def enforced() -> bool:  # the policy is enforced once the API server has loaded it
        try:
            as_agent(k8s_api, mine).patch_node(other, label)
        except ApiException as exc:
            if exc.status in (403, 422):
                return True
            raise
        return False

    wait_for("the policy enforced (the agent cannot patch another node)", enforced, 30)

    as_agent(k8s_api, mine).patch_node(mine, label)  # its own node: allowed
    assert client.CoreV1Api(k8s_api).read_node(mine).metadata.labels["kgwe.nvidia.io/probe"] == "x"
    assert "only the Node its pod runs on" in refused(
        lambda: as_agent(k8s_api, mine).patch_node(other, label)
    )
    refused(lambda: as_agent(k8s_api, None).patch_node(mine, label))  # a token without the claim
    refused(lambda: as_agent(k8s_api, mine).patch_node_status(other, {"status": {"capacity": {"x": "1"}}}))
    # GPU health: the GPUHealthy condition on its own Node, and Events about it in `default`
    condition = {"type": "GPUHealthy", "status": "True", "reason": "AllGPUsHealthy", "message": "ok"}
    as_agent(k8s_api, mine).patch_node_status(mine, {"status": {"conditions": [condition]}})
    got = client.CoreV1Api(k8s_api).read_node(mine).status.conditions
    assert any(c.type == "GPUHealthy" and c.status == "True" for c in got)
    refused(lambda: as_agent(k8s_api, mine).patch_node_status(other, {"status": {"conditions": [condition]}}))
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name="gpu-health-"),
        involved_object=client.V1ObjectReference(kind="Node", name=mine),
        reason="GPUUnhealthy",
        message="GPU 3: XID79",
        type="Warning",
    )
    as_agent(k8s_api, mine).create_namespaced_event("default", event)
    refused(lambda: as_agent(k8s_api, mine).create_namespaced_event("gpu-operator", event))
    # other users are not affected by the policy
    client.CoreV1Api(k8s_api).patch_node(other, label)
