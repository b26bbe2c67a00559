"""Helpers for the cluster I/O tests (real kube-apiserver from tests.harness.pytest_cluster)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.cluster.client import ensure_namespace
from tests.harness.waiting import wait_for


def put_mig_parted_config(core: client.CoreV1Api, manager: Any, configs: dict) -> None:
    ensure_namespace(core.api_client, manager.config_namespace)
    text = yaml.safe_dump({"version": "v1", "mig-configs": configs})
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=manager.config_map), data={manager.config_key: text}
    )
    try:
        core.create_namespaced_config_map(manager.config_namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(manager.config_map, manager.config_namespace, body)


def gpu_pod(
    name: str, node: str, resource: str = "nvidia.com/gpu", count: int = 1, labels: dict | None = None
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {resource: str(count)}, "requests": {resource: str(count)}},
                }
            ],
        },
    }


@pytest.fixture
def kio() -> SimpleNamespace:
    """The helpers above, for test modules (importlib mode has no package-relative imports)."""
    return SimpleNamespace(
        wait_for=wait_for,
        ensure_namespace=ensure_namespace,
        put_mig_parted_config=put_mig_parted_config,
        gpu_pod=gpu_pod,
    )
