"""The fleet commands' tests own a control plane for this package: the missing-CRD test deletes KGWE's
CRDs, which must not disturb other packages' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from kgwe.localcluster.controlplane import ControlPlane
from tests.harness.pytest_cluster import own_control_plane


@pytest.fixture(scope="package")
def control_plane() -> Iterator[ControlPlane]:
    yield from own_control_plane()


@pytest.fixture(scope="package")
def k8s_api(control_plane: ControlPlane) -> client.ApiClient:
    return control_plane.api_client()
