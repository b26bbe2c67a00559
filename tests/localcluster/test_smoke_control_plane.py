"""Proof that the local control plane is the real thing: schema validation, SSA, scheduling, kwok stages."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from kgwe.cluster.crds import install_crds, repo_crds
from kgwe.localcluster.controlplane import ControlPlane

pytestmark = pytest.mark.cluster


def test_version_is_the_pinned_release(control_plane: ControlPlane) -> None:
    version = control_plane.version()
    assert version["gitVersion"] == control_plane.binaries.kubernetes_version
    assert version["gitTreeState"] == "clean"


def test_crd_schema_violation_is_rejected_with_422(k8s_api: client.ApiClient, namespace: str) -> None:
    crds = repo_crds()
    assert crds, "deploy/crds/ holds the KGWE CRDs"
    install_crds(k8s_api, crds)
    custom = client.CustomObjectsApi(k8s_api)
    checked = 0
    for crd in crds:
        spec = crd["spec"]
        version = next(v for v in spec["versions"] if v.get("served"))
        props = version["schema"]["openAPIV3Schema"].get("properties", {})
        if props.get("spec", {}).get("type") != "object":
            continue
        group, plural, kind = spec["group"], spec["names"]["plural"], spec["names"]["kind"]
        body = {
            "apiVersion": f"{group}/{version['name']}",
            "kind": kind,
            "metadata": {"name": "bad"},
            "spec": "this should be an object",
        }
        with pytest.raises(ApiException) as err:
            if spec["scope"] == "Namespaced":
                custom.create_namespaced_custom_object(group, version["name"], namespace, plural, body)
            else:
                custom.create_cluster_custom_object(group, version["name"], plural, body)
        assert err.value.status == 422, err.value.body
        checked += 1
    assert checked > 0


def test_server_side_apply_field_managers_and_conflict(k8s_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(k8s_api)

    def apply(manager: str, value: str, force: bool = False) -> Any:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "ssa", "namespace": namespace},
            "data": {"owner-field": value},
        }
        return core.patch_namespaced_config_map(
            "ssa",
            namespace,
            body,
            field_manager=manager,
            force=force,
            _content_type="application/apply-patch+yaml",
        )

    created = apply("kgwe-a", "1")
    assert created.data == {"owner-field": "1"}
    assert {m.manager for m in created.metadata.managed_fields} == {"kgwe-a"}
    with pytest.raises(ApiException) as err:
        apply("kgwe-b", "2")
    assert err.value.status == 409
    assert "kgwe-a" in err.value.body
    forced = apply("kgwe-b", "2", force=True)
    assert forced.data == {"owner-field": "2"}
    owners = {m.manager for m in forced.metadata.managed_fields if m.operation == "Apply"}
    assert owners == {"kgwe-b"}


def _gpu_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def _create_and_watch(
    core: client.CoreV1Api, namespace: str, body: dict[str, Any], done: Any, timeout: int = 60
) -> tuple[Any, list[str]]:
    """Create a pod and follow it from its creation until `done(pod)`; returns (pod, phases seen)."""
    created = core.create_namespaced_pod(namespace, body)
    phases = [created.status.phase]
    w = watch.Watch()
    name = body["metadata"]["name"]
    for event in w.stream(
        core.list_namespaced_pod,
        namespace,
        field_selector=f"metadata.name={name}",
        resource_version=created.metadata.resource_version,
        timeout_seconds=timeout,
    ):
        pod = event["object"]
        if phases[-1] != pod.status.phase:
            phases.append(pod.status.phase)
        if done(pod):
            w.stop()
            return pod, phases
    pytest.fail(f"pod {name} did not reach the expected state; phases seen: {phases}")


def test_scheduler_binds_gpu_pod_and_kwok_runs_it(
    control_plane: ControlPlane, k8s_api: client.ApiClient, namespace: str, gpu_node: Any
) -> None:
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-H100")
    # What kube-controller-manager did for us: the node lifecycle controller lifted the not-ready taint
    # that admission put on the new node, and the serviceaccount controller made `default` here.
    taints = core.read_node(node).spec.taints or []
    assert "node.kubernetes.io/not-ready" not in {t.key for t in taints}
    assert core.read_namespaced_service_account("default", namespace).metadata.name == "default"
    pod, phases = _create_and_watch(
        core, namespace, _gpu_pod("two-gpus", node, 2), lambda p: p.status.phase == "Running"
    )
    assert pod.spec.node_name == node
    assert phases == ["Pending", "Running"]
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["PodScheduled"] == "True"
    assert conditions["Ready"] == "True"
    assert pod.status.pod_ip
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=two-gpus").items
    assert any(e.reason == "Scheduled" and node in e.message for e in events)

    # The scheduler really counts nvidia.com/gpu: 8 on the node, 2 used, so 7 more do not fit.

    def unschedulable(p: Any) -> bool:
        conditions = p.status.conditions or []
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)

    pending, _ = _create_and_watch(core, namespace, _gpu_pod("seven-gpus", node, 7), unschedulable)
    assert pending.spec.node_name is None
    assert "nvidia.com/gpu" in next(c.message for c in pending.status.conditions if c.type == "PodScheduled")
