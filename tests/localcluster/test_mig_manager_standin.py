"""The MIG manager stand-in follows the GPU Operator label protocol on a real apiserver.

The test only talks to the API (labels, ConfigMap, allocatable), so it reads the same on a real cluster
with the GPU Operator's MIG manager.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from kgwe.localcluster.gpunodes import MIG_CONFIG_LABEL, MIG_STATE_LABEL
from kgwe.localcluster.migmanager import MigManagerStandIn

pytestmark = pytest.mark.cluster

MIG_CONFIGS = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "kgwe-mixed": [
            {"devices": [0, 1, 2, 3, 4, 5], "mig-enabled": False},
            {"devices": [6, 7], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        ],
        "kgwe-overfull": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 2}}],
    },
}


@pytest.fixture
def mig_parted_config(k8s_api: client.ApiClient, mig_manager: MigManagerStandIn) -> Any:
    core = client.CoreV1Api(k8s_api)
    ns = mig_manager.config_namespace
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    except ApiException as exc:
        if exc.status != 409:
            raise
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=mig_manager.config_map),
        data={mig_manager.config_key: yaml.safe_dump(MIG_CONFIGS)},
    )
    try:
        core.create_namespaced_config_map(ns, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(mig_manager.config_map, ns, body)
    yield
    core.delete_namespaced_config_map(mig_manager.config_map, ns)


DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"


def _select_config(core: client.CoreV1Api, node: str, config: str) -> list[str]:
    """Set nvidia.com/mig.config and return the state label values seen until a final state.

    A `pending` state is recorded as `pending/<device-plugin deploy label>` to show the operand pause.
    """
    listing = core.list_node(field_selector=f"metadata.name={node}")
    core.patch_node(node, {"metadata": {"labels": {MIG_CONFIG_LABEL: config}}})
    states: list[str] = []
    w = watch.Watch()
    for event in w.stream(
        core.list_node,
        field_selector=f"metadata.name={node}",
        resource_version=listing.metadata.resource_version,
        timeout_seconds=30,
    ):
        labels = event["object"].metadata.labels
        if labels.get(MIG_CONFIG_LABEL) != config:
            continue
        state = labels.get(MIG_STATE_LABEL)
        if state == "pending":
            state = f"pending/{labels.get(DEVICE_PLUGIN)}"
        if not states or states[-1] != state:
            states.append(state)
        if state == "failed" or (state == "success" and any(x.startswith("pending") for x in states)):
            w.stop()
            break
    return states


def test_mig_config_change_goes_pending_then_success_and_updates_allocatable(
    k8s_api: client.ApiClient, gpu_node: Any, mig_parted_config: None
) -> None:
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-H100")
    states = _select_config(core, node, "kgwe-mixed")
    assert states[-2:] == ["pending/paused-for-mig-change", "success"]
    assert core.read_node(node).metadata.labels[DEVICE_PLUGIN] == "true"
    alloc = core.read_node(node).status.allocatable
    assert alloc["nvidia.com/gpu"] == "6"
    assert alloc["nvidia.com/mig-3g.40gb"] == "4"

    states = _select_config(core, node, "all-disabled")
    assert states[-2:] == ["pending/paused-for-mig-change", "success"]
    alloc = core.read_node(node).status.allocatable
    assert alloc["nvidia.com/gpu"] == "8"
    assert not [k for k in alloc if k.startswith("nvidia.com/mig-")]


def test_unknown_or_impossible_config_fails_and_keeps_resources(
    k8s_api: client.ApiClient, gpu_node: Any, mig_parted_config: None
) -> None:
    core = client.CoreV1Api(k8s_api)
    for config in ("no-such-config", "kgwe-overfull"):
        node = gpu_node("DGX-A100")  # fresh node each time: its state label starts at `success`
        assert _select_config(core, node, config) == ["success", "failed"]
        assert core.read_node(node).status.allocatable["nvidia.com/gpu"] == "8"
