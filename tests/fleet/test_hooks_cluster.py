"""`kgwe hook` (the chart's hooks) on the real control plane: the post-delete step removes exactly what the
agent wrote — the fields its field manager owns, its condition and its taint, also over values an earlier
agent wrote under another manager (the first publish of a process claims them) — and the GPUWorkload
controller's RoleBindings, and nothing else; the pre-delete step refuses to delete PolicyRepositories no
controller is there to release, saying what to do; the chart's PolicyRepository is applied in place."""

from __future__ import annotations

import argparse
import dataclasses
from datetime import UTC, datetime

import pytest
from kubernetes import client

from kgwe.agent import agent_cmd
from kgwe.cluster.crds import install_crds
from kgwe.errors import KgweError
from kgwe.fleet import hooks
from kgwe.topology.health import GPUFault
from kgwe.vocab import (
    GPU_HEALTH_ANNOTATION,
    GPU_HEALTH_CONDITION,
    GPU_UNHEALTHY_TAINT,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    POLICY_REPOSITORY_FINALIZER,
    TOPOLOGY_ANNOTATION,
    WORKLOAD_ROLEBINDING,
    WORKLOAD_WRITER_CLUSTERROLE,
)
from tests.harness.policyrepos import delete_unreleased

pytestmark = pytest.mark.cluster


def _observe(name: str, sick: bool = False) -> agent_cmd.Observation:
    args = argparse.Namespace(fake_nvml=name, node_name=None, pod_resources_socket="")
    obs = agent_cmd.observe(args)
    if not sick:
        return obs
    gpus = len(obs.found.topology.gpus)
    fault = GPUFault("XidCritical", "Xid 79: fell off the bus", datetime(2026, 12, 1, tzinfo=UTC))
    return dataclasses.replace(obs, faults=dict.fromkeys(range(gpus), fault), gpu_total=gpus)


def test_post_delete_removes_what_the_agent_wrote_and_kgwes_rolebindings_only(k8s_api, gpu_node, namespace):
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-1-V100")
    before = core.read_node(node)
    # an earlier agent (no field manager of its own) wrote the topology labels; this one claims them first
    core.patch_node(node, {"metadata": {"labels": {"kgwe.nvidia.io/nvlink": "true"}}})
    agent_cmd.publish(core, node, _observe("DGX-1-V100", sick=True), taint=True, claim=True)
    # what others wrote stays: a person's label in KGWE's prefix, another tool's taint
    core.patch_node(node, {"metadata": {"labels": {"kgwe.nvidia.io/pool": "training"}}})
    taints = [t.to_dict() for t in core.read_node(node).spec.taints or []]
    other = {"key": "example.com/maintenance", "value": "soon", "effect": "PreferNoSchedule"}
    core.patch_node(node, {"spec": {"taints": [*taints, other]}})
    sick = core.read_node(node)
    assert GPU_UNHEALTHY_TAINT in {t.key for t in sick.spec.taints}
    assert GPU_HEALTH_CONDITION in {c.type for c in sick.status.conditions}
    assert {"kgwe.nvidia.io/nvlink", "kgwe.nvidia.io/topology"} <= set(sick.metadata.labels)
    rbac = client.RbacAuthorizationV1Api(k8s_api)
    role = {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": WORKLOAD_WRITER_CLUSTERROLE,
    }
    binding = {
        "metadata": {"name": WORKLOAD_ROLEBINDING, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
        "roleRef": role,
        "subjects": [{"kind": "ServiceAccount", "name": "kgwe-controller", "namespace": "kgwe-system"}],
    }
    rbac.create_namespaced_role_binding(namespace, binding)
    rbac.create_namespaced_role_binding(namespace, {**binding, "metadata": {"name": "someone-elses"}})

    said: list[str] = []
    done = hooks.leftovers(k8s_api, ("kgwe-system-absent", "gpu-operator-absent"), 5, said.append)
    assert done.role_bindings == [f"{namespace}/{WORKLOAD_ROLEBINDING}"]
    after = core.read_node(node)
    kgwe_labels = {k for k in after.metadata.labels if k.startswith("kgwe.nvidia.io/")}
    assert kgwe_labels == {"kgwe.nvidia.io/pool"}, "the agent's labels go, a person's stays"
    assert not {TOPOLOGY_ANNOTATION, GPU_HEALTH_ANNOTATION} & set(after.metadata.annotations or {})
    assert [t.key for t in after.spec.taints or [] if t.key != "nvidia.com/gpu"] == [
        "example.com/maintenance"
    ]
    assert GPU_HEALTH_CONDITION not in {c.type for c in after.status.conditions or []}
    assert after.metadata.labels["nvidia.com/gpu.product"] == before.metadata.labels["nvidia.com/gpu.product"]
    names = [b.metadata.name for b in rbac.list_namespaced_role_binding(namespace).items]
    assert names == ["someone-elses"]
    assert any(f"node {node}: removed" in line for line in said)
    # run again: nothing left to remove
    assert hooks.leftovers(k8s_api, ("kgwe-system-absent",), 5, said.append).nodes == {}


def test_pre_delete_without_a_controller_refuses_and_says_how_to_let_go(k8s_api, namespace):
    install_crds(k8s_api)
    custom = client.CustomObjectsApi(k8s_api)
    where = ("kgwe.nvidia.io", "v1", namespace, "policyrepositories")
    manifest = {
        "apiVersion": "kgwe.nvidia.io/v1",
        "kind": "PolicyRepository",
        "metadata": {"name": "gpu-policy", "namespace": namespace},
        "spec": {"url": "https://git.example.com/p.git", "deletionPolicy": "Retain"},
    }
    try:
        assert "applied" in hooks.policy_repository(k8s_api, manifest)
        manifest["spec"]["interval"] = "5m"
        hooks.policy_repository(k8s_api, manifest)  # an upgrade: updated in place, never deleted
        repo = custom.get_namespaced_custom_object(*where, "gpu-policy")
        assert repo["spec"]["interval"] == "5m" and repo["metadata"]["generation"] == 2
        finalizers = {"metadata": {"finalizers": [POLICY_REPOSITORY_FINALIZER]}}
        custom.patch_namespaced_custom_object(*where, "gpu-policy", finalizers)
        with pytest.raises(
            KgweError, match=r"no ready replica, so nothing can release gpu-policy.*finalizers"
        ):
            hooks.release(k8s_api, namespace, 1, lambda _: None)
        assert not custom.get_namespaced_custom_object(*where, "gpu-policy")["metadata"].get(
            "deletionTimestamp"
        )
    finally:
        delete_unreleased(custom, namespace, "gpu-policy")
    assert hooks.release(k8s_api, namespace, 1, lambda _: None) == []  # nothing left to release
