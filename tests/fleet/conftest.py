"""The fleet commands' tests own a control plane for this package: the missing-CRD test deletes KGWE's
CRDs, which must not disturb other packages' tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from kgwe.localcluster.controlplane import ControlPlane


@pytest.fixture(scope="package")
def control_plane(new_control_plane: Callable[..., Any]) -> Iterator[ControlPlane]:
    with new_control_plane() as cp:
        yield cp


@pytest.fixture(scope="package")
def k8s_api(control_plane: ControlPlane) -> client.ApiClient:
    return control_plane.api_client()
