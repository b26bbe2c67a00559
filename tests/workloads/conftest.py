"""The workload tests need native gang scheduling: a control plane with the GenericWorkload gate
(kube-apiserver serves scheduling.k8s.io/v1beta1 PodGroups, kube-scheduler runs GangScheduling), shared by
this package and stopped after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from kgwe.localcluster.controlplane import ControlPlane
from tests.harness.pytest_cluster import own_control_plane


@pytest.fixture(scope="package")
def control_plane() -> Iterator[ControlPlane]:
    yield from own_control_plane(feature_gates={"GenericWorkload": True})


@pytest.fixture(scope="package")
def k8s_api(control_plane: ControlPlane) -> client.ApiClient:
    return control_plane.api_client()
