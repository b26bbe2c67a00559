"""The workload tests need native gang scheduling: a control plane with the GenericWorkload gate
(kube-apiserver serves scheduling.k8s.io/v1beta1 PodGroups, kube-scheduler runs GangScheduling), shared by
this package and stopped after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from kgwe.localcluster.controlplane import ControlPlane


@pytest.fixture(scope="package")
def control_plane(new_control_plane: Callable[..., Any]) -> Iterator[ControlPlane]:
    with new_control_plane(feature_gates={"GenericWorkload": True}) as cp:
        yield cp


@pytest.fixture(scope="package")
def k8s_api(control_plane: ControlPlane) -> client.ApiClient:
    return control_plane.api_client()


CONTROLLER_SA = "system:serviceaccount:kgwe-system:kgwe-controller"


@pytest.fixture
def controller_account(k8s_api: client.ApiClient) -> client.ApiClient:
    """deploy/controller's RBAC and admission policies applied; an API client impersonating the controller's
    ServiceAccount."""
    return as_controller(k8s_api)


def as_controller(k8s_api: client.ApiClient) -> client.ApiClient:
    """deploy/controller's RBAC and admission policies applied to this cluster; a client as the controller."""
    import yaml

    from kgwe.cluster.client import ensure_namespace
    from kgwe.resources import deploy_dir
    from tests.harness.deployed import apply_docs

    for ns in ("kgwe-system", "gpu-operator"):  # the Roles' namespaces
        ensure_namespace(k8s_api, ns)
    files = ("rbac.yaml", "workloads-rbac.yaml", "workloads-admission.yaml")
    docs = [d for f in files for d in yaml.safe_load_all((deploy_dir() / "controller" / f).read_text())]
    apply_docs(k8s_api, [d for d in docs if d], "rbac-test")
    impersonated = client.ApiClient(k8s_api.configuration)
    impersonated.set_default_header("Impersonate-User", CONTROLLER_SA)
    return impersonated
