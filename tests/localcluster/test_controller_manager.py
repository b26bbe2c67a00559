"""The harness runs the real kube-controller-manager: workload controllers, garbage collection, gated APIs."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.localcluster.controlplane import ControlPlane, find_binaries
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster


def _container(gpus: int = 0) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"name": "main", "image": "registry.example/app:1", "resources": {"limits": limits}}


def test_deployment_creates_running_pods_and_deletion_cascades(
    k8s_api: client.ApiClient, namespace: str, gpu_node: Any
) -> None:
    gpu_node("DGX-A100")
    apps, core = client.AppsV1Api(k8s_api), client.CoreV1Api(k8s_api)
    labels = {"app": "web"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [_container(1)]}},
            },
        },
    )

    def running_pods() -> list[Any]:
        pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
        return [p for p in pods if p.status.phase == "Running"]

    pods = wait_for("2 Running pods", lambda: len(running_pods()) == 2 and running_pods())
    assert all(p.metadata.owner_references[0].kind == "ReplicaSet" for p in pods)
    wait_for(
        "Deployment available",
        lambda: (apps.read_namespaced_deployment("web", namespace).status.available_replicas or 0) == 2,
    )

    apps.delete_namespaced_deployment("web", namespace, propagation_policy="Background")
    wait_for(
        "garbage collection of the ReplicaSet and pods",
        lambda: (
            not apps.list_namespaced_replica_set(namespace).items
            and not core.list_namespaced_pod(namespace, label_selector="app=web").items
        ),
    )


def test_indexed_job_runs_to_completion(k8s_api: client.ApiClient, namespace: str, gpu_node: Any) -> None:
    gpu_node("DGX-A100")
    batch = client.BatchV1Api(k8s_api)
    batch.create_namespaced_job(
        namespace,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train"},
            "spec": {
                "completions": 2,
                "parallelism": 2,
                "completionMode": "Indexed",
                "template": {"spec": {"restartPolicy": "Never", "containers": [_container(4)]}},
            },
        },
    )

    def complete() -> Any:
        job = batch.read_namespaced_job("train", namespace)
        done = {c.type for c in job.status.conditions or [] if c.status == "True"}
        return job if "Complete" in done else None

    job = wait_for("Job Complete", complete)
    assert job.status.succeeded == 2
    assert job.status.completed_indexes == "0,1"


def test_podgroup_api_is_served_only_with_the_generic_workload_gate(k8s_api: client.ApiClient) -> None:
    def served(api: client.ApiClient) -> bool:
        try:
            resources = client.ApisApi(api).get_api_versions().groups
        except ApiException:
            return False
        versions = {v.group_version for g in resources for v in g.versions}
        return "scheduling.k8s.io/v1beta1" in versions

    assert not served(k8s_api)
    with ControlPlane(find_binaries(), feature_gates={"GenericWorkload": True}) as gated:
        assert served(gated.api_client())
        listed = client.CustomObjectsApi(gated.api_client()).list_cluster_custom_object(
            "scheduling.k8s.io", "v1beta1", "podgroups"
        )
        assert listed["items"] == []
        assert "--feature-gates=GenericWorkload=true" in gated.log_paths()["kube-scheduler"].read_text()
