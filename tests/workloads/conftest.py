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
