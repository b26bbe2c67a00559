"""The local cluster's real node as a GPU node run by NVIDIA's own code (`kgwe cluster up --gpu-profile
h100`): NVIDIA's device plugin v0.20.0 advertises the mock NVML's GPUs, GFD labels the node, a pod gets the
UUIDs the plugin allocated (and the kubelet's PodResources API names the same); the device-plugin stand-in
of the kwok nodes switches configs as NVIDIA's plugin and GFD do for the same ConfigMap keys, and a key the
ConfigMap lacks is refused by config-manager without a change; an injected failure is withdrawn by NVIDIA's
plugin. (KGWE's own parts on this node, through its chart: tests/deploy/test_nvidia_end_to_end.py.)"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from kgwe.agent.podresources import DEFAULT_SOCKET, list_pod_resources
from kgwe.fleet.nodes import device_plugin_state
from kgwe.localcluster import gpunodes, mocknvml, nvidiastack
from kgwe.localcluster.deviceplugin import DevicePluginStandIn, advertised, parse_config
from kgwe.localcluster.nfd import FEATURE_LABELS_ANNOTATION
from kgwe.localcluster.nvidiastack import GFD_DAEMONSET
from kgwe.localcluster.realnode import CGROUP_ROOT, NODE_NAME
from kgwe.vocab import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIGMAP,
    DEVICE_PLUGIN_DAEMONSET,
    GPU_OPERATOR_NAMESPACE,
    GPU_PRODUCT_LABEL,
    GPU_REPLICAS_LABEL,
    GPU_RESOURCE,
    GPU_SHARING_STRATEGY_LABEL,
    SHARED_GPU_RESOURCE,
)
from tests.harness.pods import devices_pod, visible_devices
from tests.harness.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.timeout(2400)]

H100 = "NVIDIA-H100-80GB-HBM3"
SHARING_LABELS = (GPU_REPLICAS_LABEL, GPU_SHARING_STRATEGY_LABEL, GPU_PRODUCT_LABEL)


@pytest.fixture
def api(gpu_cluster) -> client.ApiClient:
    return gpu_cluster.cp.api_client()


@pytest.fixture
def ns(api) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = f"gpu-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for("the default ServiceAccount", lambda: core.list_namespaced_service_account(name).items, 60)
    yield name
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name)


def _node(api: client.ApiClient, name: str = NODE_NAME) -> client.V1Node:
    return client.CoreV1Api(api).read_node(name)


def _gpu_resources(node: client.V1Node) -> dict[str, str]:
    return {k: v for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/")}


def _plugin_pod(api: client.ApiClient, app: str = DEVICE_PLUGIN_DAEMONSET) -> client.V1Pod:
    pods = (
        client.CoreV1Api(api).list_namespaced_pod(GPU_OPERATOR_NAMESPACE, label_selector=f"app={app}").items
    )
    [pod] = [p for p in pods if p.spec.node_name == NODE_NAME and p.metadata.deletion_timestamp is None]
    return pod


def _nvidia_state(api: client.ApiClient) -> str:
    return nvidiastack.pods_state(api) + f"\nnode: {_gpu_resources(_node(api))}"


def test_the_gpu_node_is_advertised_by_nvidias_plugin_and_labelled_by_gfd(gpu_cluster, api):
    node = _node(api)
    assert {k: v for k, v in _gpu_resources(node).items() if v != "0"} == {GPU_RESOURCE: "8"}
    labels = node.metadata.labels
    assert labels[GPU_PRODUCT_LABEL] == H100 and labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.163.01"  # the mock's driver, through GFD
    assert labels["nvidia.com/mig.strategy"] == "mixed"  # KGWE's default config, read by GFD
    assert (labels[GPU_REPLICAS_LABEL], labels[GPU_SHARING_STRATEGY_LABEL]) == ("1", "none")
    published = set(node.metadata.annotations[FEATURE_LABELS_ANNOTATION].split(","))
    assert GPU_PRODUCT_LABEL in published and all(k.startswith("nvidia.com/") for k in published)
    for app in (DEVICE_PLUGIN_DAEMONSET, GFD_DAEMONSET):
        pod = _plugin_pod(api, app)
        assert pod.spec.runtime_class_name == "nvidia" and pod.status.phase == "Running"
        assert {c.image for c in pod.spec.containers} == {"nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}
        assert device_plugin_state(client.ApiClient().sanitize_for_serialization(pod)).startswith("Running")
    assert Path("/var/lib/kubelet/device-plugins/nvidia-gpu.sock").is_socket()
    assert gpu_cluster.gpu_ready_seconds > 0
    assert sorted(g.uuid for g in mocknvml.profile_gpus()) == sorted(
        f"GPU-01000100-0000-0000-0000-00000000000{i}" for i in range(8)
    )


def test_a_pod_gets_the_gpus_nvidias_plugin_allocated(gpu_cluster, api, ns, busybox):
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, devices_pod("two", 2, busybox.reference, NODE_NAME))
    wait_for(
        "the 2-GPU pod running",
        lambda: (
            core.read_namespaced_pod("two", ns).status.phase == "Running" and visible_devices(api, ns, "two")
        ),
        180,
        describe=lambda: _nvidia_state(api),
    )
    uuids = visible_devices(api, ns, "two")
    assert len(set(uuids)) == 2 and set(uuids) <= {g.uuid for g in mocknvml.profile_gpus()}
    held = [h for h in list_pod_resources(DEFAULT_SOCKET) if (h.namespace, h.pod) == (ns, "two")]
    # the kubelet answers one device entry per GPU (with its NUMA node) for NVIDIA's plugin
    assert {h.resource for h in held} == {GPU_RESOURCE}
    assert sorted(d for h in held for d in h.device_ids) == sorted(uuids)


def _configs() -> dict[str, str]:
    """Two sharing configs as KGWE renders them (time-slicing x4; x2 renamed), and one MIG-strategy switch."""

    def ts(replicas: int, rename: bool) -> str:
        block = {"renameByDefault": rename, "failRequestsGreaterThanOne": False,
                 "resources": [{"name": GPU_RESOURCE, "replicas": replicas}]}  # fmt: skip
        return yaml.safe_dump(
            {"version": "v1", "flags": {"migStrategy": "none"}, "sharing": {"timeSlicing": block}}
        )

    return {"kgwe-drift-ts4": ts(4, False), "kgwe-drift-ts2-renamed": ts(2, True)}


def _switch(api: client.ApiClient, nodes: list[str], key: str | None) -> None:
    core = client.CoreV1Api(api)
    for name in nodes:
        core.patch_node(name, {"metadata": {"labels": {DEVICE_PLUGIN_CONFIG_LABEL: key}}})


def test_the_stand_in_switches_configs_as_nvidias_plugin_and_gfd_do(gpu_cluster, api):
    """The same ConfigMap keys on the real node (NVIDIA's config-manager, plugin and GFD) and on a kwok H100
    (KGWE's stand-in): the same resources, counts and GFD sharing labels; a missing key changes nothing."""
    core = client.CoreV1Api(api)
    kwok = f"drift-h100-{secrets.token_hex(2)}"
    gpunodes.create_gpu_node(api, kwok, "DGX-H100", taints=[gpunodes.GPU_NODE_TAINT])
    standin = next(s for s in gpu_cluster._standins if isinstance(s, DevicePluginStandIn))
    configs = _configs()
    core.patch_namespaced_config_map(DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE, {"data": configs})
    try:
        for key, text in configs.items():
            expected_resources, expected_labels = advertised(parse_config(text), 8, H100)
            _switch(api, [NODE_NAME, kwok], key)

            def switched(
                name: str, resources: dict = expected_resources, gfd: dict = expected_labels
            ) -> bool:
                node = _node(api, name)
                labels = node.metadata.labels
                offered = {k: v for k, v in _gpu_resources(node).items() if v != "0"}
                return offered == {k: str(v) for k, v in resources.items()} and all(
                    labels.get(k) == v for k, v in gfd.items()
                )

            wait_for(
                f"NVIDIA's plugin and GFD on {key}",
                lambda: switched(NODE_NAME),
                300,
                describe=lambda: _nvidia_state(api),
            )
            wait_for(f"the stand-in on {key}", lambda: switched(kwok), 60)
            real, fake = _node(api), _node(api, kwok)
            assert _gpu_resources(real) == _gpu_resources(fake)  # one no longer offered: 0 on both
            assert {k: real.metadata.labels[k] for k in SHARING_LABELS} == {
                k: fake.metadata.labels[k] for k in SHARING_LABELS
            }
        assert SHARED_GPU_RESOURCE in _gpu_resources(_node(api))  # the renamed config's resource, NVIDIA's
        # a key the ConfigMap lacks: config-manager refuses it (and restarts), the plugin keeps its config
        before = _gpu_resources(_node(api))
        restarts = {c.name: c.restart_count for c in _plugin_pod(api).status.container_statuses}
        _switch(api, [NODE_NAME, kwok], "kgwe-missing")

        def refused() -> str | None:
            pod = _plugin_pod(api)
            for c in pod.status.container_statuses:
                last = c.last_state.terminated if c.last_state else None
                if (
                    c.name == "config-manager"
                    and c.restart_count > restarts[c.name]
                    and last
                    and last.message
                ):
                    return last.message
            return None

        message = wait_for("config-manager's refusal", refused, 180, describe=lambda: _nvidia_state(api))
        assert "specified config kgwe-missing does not exist" in message
        state = device_plugin_state(client.ApiClient().sanitize_for_serialization(_plugin_pod(api)))
        # crash-looping: between two crashes it runs, so either way it says why (`kgwe nodes -o wide`)
        assert "config-manager" in state and "specified config kgwe-missing does not exist" in state, state
        assert _gpu_resources(_node(api)) == before
        wait_for(
            "the stand-in's refusal",
            lambda: (kwok, "specified config kgwe-missing does not exist") in standin.errors,
            60,
        )
        assert _gpu_resources(_node(api, kwok)) == before
    finally:
        _switch(api, [NODE_NAME], None)  # back to the default config (DEFAULT_CONFIG)
        gpunodes.delete_nodes(api, [kwok])
        core.patch_namespaced_config_map(
            DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE, {"data": {k: None for k in configs}}
        )
    wait_for("the default config again", lambda: _gpu_resources(_node(api))[GPU_RESOURCE] == "8", 300,
             describe=lambda: _nvidia_state(api))  # fmt: skip


def _plugin_log(api: client.ApiClient) -> str:
    return client.CoreV1Api(api).read_namespaced_pod_log(
        _plugin_pod(api).metadata.name, GPU_OPERATOR_NAMESPACE, container="nvidia-device-plugin"
    )


def test_an_injected_failure_meets_nvidias_plugin(gpu_cluster, api, ns, busybox):
    """What NVIDIA's plugin v0.20.0 does with the mock's failures once it reads its GPUs again (SIGHUP, as
    config-manager restarts it; the mock trips a GPU only on a call made after the failure is there): an
    uncorrectable ECC error's Xid 48 reaches its health check, which withdraws GPU 3 alone (allocatable 8 ->
    7), and a pod of 7 GPUs gets the other seven; a lost GPU stops it from starting at all, so the node
    advertises no GPU, the plugin's container crash-loops with NVML's error where `kgwe nodes` shows it, and
    a GPU pod is not placed there. Cleared and restarted, it advertises every GPU again."""
    core = client.CoreV1Api(api)
    uuid = {g.index: g.uuid for g in mocknvml.profile_gpus()}
    cgroup = f"/{CGROUP_ROOT}/"

    def refused(pod: str) -> list[str]:
        events = core.list_namespaced_event(
            ns, field_selector=f"involvedObject.name={pod},reason=FailedScheduling"
        )
        return [e.message for e in events.items if f"Insufficient {GPU_RESOURCE}" in (e.message or "")]

    try:
        assert _gpu_resources(_node(api))[GPU_RESOURCE] == "8"
        before = nvidiastack.withdrawals(_plugin_log(api), uuid[3])
        nvidiastack.fail_and_withdraw(api, cgroup, 3, 48)
        log = _plugin_log(api)
        assert f"XidCriticalError: Xid=48 on Device={uuid[3]}" in log
        assert nvidiastack.withdrawals(log, uuid[3]) == before + 1
        assert all(nvidiastack.withdrawals(log, uuid[i]) == 0 for i in uuid if i != 3), log
        wait_for(
            "NVIDIA's plugin withdrawing GPU 3",
            lambda: _gpu_resources(_node(api))[GPU_RESOURCE] == "7",
            120,
            describe=lambda: _nvidia_state(api),
        )
        core.create_namespaced_pod(ns, devices_pod("seven", 7, busybox.reference, NODE_NAME))
        seen = wait_for(
            "the 7-GPU pod running",
            lambda: visible_devices(api, ns, "seven"),
            180,
            describe=lambda: _nvidia_state(api),
        )
        assert sorted(seen) == sorted(u for i, u in uuid.items() if i != 3)
        core.create_namespaced_pod(ns, devices_pod("one-more", 1, busybox.reference, NODE_NAME))
        wait_for("a GPU pod beyond the seven refused", lambda: refused("one-more"), 120)
        assert core.read_namespaced_pod("one-more", ns).spec.node_name is None
        assert _gpu_resources(_node(api))[GPU_RESOURCE] == "7"
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        mocknvml.inject_failure(5, "lost")
        assert nvidiastack.restart_device_plugin(cgroup) == 1
        wait_for(
            "the node without NVIDIA's GPUs",
            lambda: _gpu_resources(_node(api)).get(GPU_RESOURCE) == "0",
            180,
            describe=lambda: _nvidia_state(api),
        )

        def crashing() -> str | None:
            state = device_plugin_state(client.ApiClient().sanitize_for_serialization(_plugin_pod(api)))
            return state if "ERROR_GPU_IS_LOST" in state else None

        state = wait_for(
            "the plugin's crash in its pod's state", crashing, 180, describe=lambda: _nvidia_state(api)
        )
        assert "nvidia-device-plugin" in state and "error getting device memory info" in state, state
        core.create_namespaced_pod(ns, devices_pod("waits", 1, busybox.reference, NODE_NAME))
        wait_for("the GPU pod refused for want of GPUs", lambda: refused("waits"), 120)
        assert core.read_namespaced_pod("waits", ns).spec.node_name is None
    finally:
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        mocknvml.clear_failures()
        # a new pod rather than the crash loop's back-off
        core.delete_namespaced_pod(
            _plugin_pod(api).metadata.name, GPU_OPERATOR_NAMESPACE, grace_period_seconds=0
        )
    wait_for(
        "every GPU back",
        lambda: _gpu_resources(_node(api))[GPU_RESOURCE] == "8",
        180,
        describe=lambda: _nvidia_state(api),
    )
