"""KGWE end to end through NVIDIA's own code on the local GPU node (`kgwe cluster up --gpu-profile h100`, the
seed `helm install`, a policy repository over https): the agent loads NVIDIA's mock NVML with the real
nvidia-ml-py and publishes the HGX H100 topology; a GPUWorkload of 8 GPUs is placed by kgwe-scheduler on the
real node's NVSwitch set and its container sees the UUIDs NVIDIA's plugin allocated, which the agent's
PodResources mapping names too, and metering charges it at the H100's price; a GPUSharingStrategy commit
switches NVIDIA's plugin through NVIDIA's config-manager (allocatable 8 -> 32, GFD's labels follow, the
rollout waits on them, `kgwe nodes` shows it); an injected ECC error and a lost GPU are marked by the agent,
withdrawn by NVIDIA's plugin, avoided by the extender and shown by `kgwe health`.

In order, on one install (the tests of this module share it)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal

import pytest
from kubernetes import client
from kubernetes.stream import stream

from kgwe.agent.podresources import DEFAULT_SOCKET, list_pod_resources
from kgwe.cost.metering import holdings
from kgwe.cost.usage import WHOLE
from kgwe.localcluster import mocknvml, nvidiastack
from kgwe.localcluster.realnode import CGROUP_ROOT, NODE_NAME
from kgwe.topology import annotation, health
from kgwe.vocab import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIGMAP,
    DEVICE_PLUGIN_DAEMONSET,
    GPU_HEALTH_CONDITION,
    GPU_OPERATOR_NAMESPACE,
    GPU_PODS_ANNOTATION,
    GPU_REPLICAS_LABEL,
    GPU_RESOURCE,
    GPU_SHARING_STRATEGY_LABEL,
    SCHEDULER_NAME,
)
from tests.harness.kgwe_on_gpu_node import H100_PRICE, KgweOnGpuNode, sharing_strategy
from tests.harness.pods import devices_container, devices_pod, visible_devices
from tests.harness.pytest_cluster import GPU_PROFILE
from tests.harness.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.image, pytest.mark.timeout(3600)]

AGENT_INTERVAL_SECONDS = 2
DRIVER_LABEL, MOCK_DRIVER = "nvidia.com/cuda.driver-version.full", "550.163.01"


def _pods(
    api: client.ApiClient, selector: str, namespace: str = GPU_OPERATOR_NAMESPACE
) -> list[client.V1Pod]:
    """The pods of `selector` on the GPU node."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in pods if p.spec.node_name == NODE_NAME and p.metadata.deletion_timestamp is None]


def _allocatable(api: client.ApiClient) -> str | None:
    return (client.CoreV1Api(api).read_node(NODE_NAME).status.allocatable or {}).get(GPU_RESOURCE)


@pytest.fixture(scope="module")
def kgwe(_real_node_session, kgwe_image, chart, tmp_path_factory) -> Iterator[KgweOnGpuNode]:
    cluster = _real_node_session.ensure(gpu_profile=GPU_PROFILE)
    cluster.import_image(kgwe_image.archive)
    sets = (f"agent.intervalSeconds={AGENT_INTERVAL_SECONDS}",)
    with KgweOnGpuNode(cluster.cp.kubeconfig_path, tmp_path_factory.mktemp("kgwe-gpu"), sets) as installed:
        yield installed


@pytest.fixture(scope="module")
def ml(kgwe) -> Iterator[str]:
    name = kgwe.opted_in_namespace(f"ml-{secrets.token_hex(3)}")
    yield name
    core = client.CoreV1Api(kgwe.api)
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name)


def _node(api: client.ApiClient) -> client.V1Node:
    return client.CoreV1Api(api).read_node(NODE_NAME)


def _state(api: client.ApiClient) -> str:
    node = _node(api)
    gpus = {k: v for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/")}
    return f"{nvidiastack.pods_state(api)}\nnode allocatable {gpus}, labels {node.metadata.labels}"


def _kgwe(kgwe: KgweOnGpuNode, *args: str) -> dict:
    """A `kgwe` fleet command against the cluster, its JSON."""
    done = subprocess.run(
        [sys.executable, "-m", "kgwe.cli", *args, "-o", "json", "--kubeconfig", str(kgwe.kubeconfig)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _namespace_state(api: client.ApiClient, ns: str) -> str:
    """The GPUWorkloads' conditions, the pods and the Events of `ns`: why something did not run."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    lines = []
    for wl in custom.list_namespaced_custom_object("kgwe.nvidia.io", "v1", ns, "gpuworkloads")["items"]:
        for c in (wl.get("status") or {}).get("conditions") or []:
            lines.append(
                f"{wl['metadata']['name']} {c['type']}={c['status']} {c.get('reason')}: {c.get('message')}"
            )
    for pod in core.list_namespaced_pod(ns).items:
        lines.append(f"pod {pod.metadata.name} {pod.status.phase} on {pod.spec.node_name}")
    for e in core.list_namespaced_event(ns).items[-15:]:
        lines.append(f"event {e.involved_object.name} {e.reason}: {e.message}")
    return "\n".join(lines)


def test_the_agent_loads_nvidias_library_and_publishes_the_topology(kgwe):
    api = kgwe.api
    node = wait_for(
        "the agent's topology on the GPU node",
        lambda: (n := _node(api)).metadata.labels.get("kgwe.nvidia.io/topology") and n,
        180,
        describe=lambda: _state(api),
    )
    assert node.metadata.labels["kgwe.nvidia.io/topology"] == "HGX-H100"
    assert node.metadata.labels["kgwe.nvidia.io/nvswitch"] == "true"
    topo = annotation.decode(node.metadata.annotations[annotation.ANNOTATION_KEY])
    assert [g.uuid for g in topo.gpus] == [g.uuid for g in mocknvml.profile_gpus()]
    assert {g.nvswitch_links for g in topo.gpus} == {18} and {g.numa_node for g in topo.gpus} == {0, 1}
    [agent] = [
        p
        for p in client.CoreV1Api(api)
        .list_namespaced_pod(GPU_OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/component=agent")
        .items
        if p.spec.node_name == NODE_NAME
    ]
    assert agent.spec.runtime_class_name == "nvidia"
    # the real nvidia-ml-py in KGWE's image loads NVIDIA's library from the driver root, not from the image
    probe = (
        "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlSystemGetDriverVersion()); "
        "print(next(l.split()[-1] for l in open('/proc/self/maps') if 'libnvidia-ml' in l))"
    )
    out = stream(
        client.CoreV1Api(api).connect_get_namespaced_pod_exec, agent.metadata.name, GPU_OPERATOR_NAMESPACE,
        command=["python3", "-c", probe], stderr=True, stdout=True,
    )  # fmt: skip
    assert out.split() == [MOCK_DRIVER, f"/run/nvidia/driver/usr/lib64/libnvidia-ml.so.{MOCK_DRIVER}"], out
    condition = next(c for c in node.status.conditions if c.type == GPU_HEALTH_CONDITION)
    assert (condition.status, condition.reason) == ("True", "AllGPUsHealthy")


def _workload(name: str, gpus: int, image: str) -> dict:
    return {
        "apiVersion": "kgwe.nvidia.io/v1",
        "kind": "GPUWorkload",
        "metadata": {"name": name},
        "spec": {
            "gpuRequirements": {
                "count": gpus,
                "product": "H100",
                "topology": {"preference": "NVLinkOptimal"},
            },
            "workloadType": "Training",
            "podTemplate": {
                "spec": {
                    # the GPU node by what GFD says of its driver (KGWE refuses a pod pinned by host name;
                    # the kwok H100 nodes say driver 570)
                    "nodeSelector": {DRIVER_LABEL: MOCK_DRIVER},
                    "containers": [devices_container(image)],
                }
            },
        },
    }


def test_a_gpuworkload_of_8_gpus_runs_on_nvidias_allocation_and_is_metered(kgwe, ml, busybox):
    api, core, custom = kgwe.api, client.CoreV1Api(kgwe.api), client.CustomObjectsApi(kgwe.api)
    custom.create_namespaced_custom_object(
        "kgwe.nvidia.io", "v1", ml, "gpuworkloads", _workload("llm", 8, busybox.reference)
    )

    def running() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(ml).items
        started = (p for p in pods if p.status.phase == "Running")
        return next((p for p in started if visible_devices(api, ml, p.metadata.name)), None)

    pod = wait_for(
        "the GPUWorkload's pod running",
        running,
        300,
        describe=lambda: _namespace_state(api, ml) + _state(api),
    )
    assert pod.spec.scheduler_name == SCHEDULER_NAME and pod.spec.node_name == NODE_NAME
    uuids = visible_devices(api, ml, pod.metadata.name)
    by_index = {g.index: g.uuid for g in mocknvml.profile_gpus()}
    assert sorted(uuids) == sorted(by_index.values()), "the 8 GPUs NVIDIA's plugin allocated"
    held = [h for h in list_pod_resources(DEFAULT_SOCKET) if h.pod == pod.metadata.name]
    assert sorted(d for h in held for d in h.device_ids) == sorted(uuids)
    holder = f"{ml}/{pod.metadata.name}"
    mapping = wait_for(
        "the agent's pod -> GPU mapping",
        lambda: (
            (m := json.loads(_node(api).metadata.annotations.get(GPU_PODS_ANNOTATION, "{}")))
            and len(m) == 8
            and m
        ),
        120,
    )
    # every GPU of the NVSwitch set, by index as the agent maps them from the kubelet's PodResources
    assert sorted(int(i) for i, p in mapping.items() if p == holder) == list(range(8))
    assert {by_index[int(i)] for i, p in mapping.items() if p == holder} == set(uuids)
    # metering: the workload's cost is its metered GPU-hours at the H100's price
    cost = wait_for(
        "the workload's metered cost",
        lambda: (
            (
                c := (
                    custom.get_namespaced_custom_object(
                        "kgwe.nvidia.io", "v1", ml, "gpuworkloads", "llm"
                    ).get("status")
                    or {}
                ).get("cost")
            )
            and Decimal(c["gpuHours"]) > 0
            and c
        ),
        300,
    )
    assert cost["currency"] == "USD"
    # the workload's status names the same GPUs: what NVIDIA's plugin allocated, by index
    placed = wait_for(
        "the workload's placement with its GPUs",
        lambda: [
            (p["pod"], p["node"], p["gpus"])
            for p in custom.get_namespaced_custom_object("kgwe.nvidia.io", "v1", ml, "gpuworkloads", "llm")[
                "status"
            ].get("placements", [])
            if p.get("gpus")
        ],
        120,
    )
    assert placed == [(pod.metadata.name, NODE_NAME, list(range(8)))]
    assert abs(Decimal(cost["amount"]) - Decimal(cost["gpuHours"]) * Decimal(H100_PRICE)) < Decimal("0.01")
    raw = client.ApiClient().sanitize_for_serialization(core.read_namespaced_pod(pod.metadata.name, ml))
    found, reason = holdings(raw)  # what the controller's meter reads of the pod: 8 whole GPUs
    assert reason is None and [(h.kind, h.count) for h in found] == [(WHOLE, len(uuids))], (found, reason)
    custom.delete_namespaced_custom_object("kgwe.nvidia.io", "v1", ml, "gpuworkloads", "llm")
    wait_for("its pod gone", lambda: not core.list_namespaced_pod(ml).items, 180)


def test_a_sharing_commit_switches_nvidias_plugin_through_its_config_manager(kgwe):
    api = kgwe.api
    kgwe.commit(
        {"sharing/h100-ts4.yaml": sharing_strategy("h100-ts4", 4, NODE_NAME)}, "time-slice the H100 node"
    )

    def shared() -> bool:
        node = _node(api)
        labels = node.metadata.labels
        return (
            (node.status.allocatable or {}).get(GPU_RESOURCE) == "32"
            and labels.get(GPU_REPLICAS_LABEL) == "4"
            and labels.get(GPU_SHARING_STRATEGY_LABEL) == "time-slicing"
        )

    wait_for("NVIDIA's plugin switched to 4 replicas", shared, 600, describe=lambda: _state(api))
    key = _node(api).metadata.labels[DEVICE_PLUGIN_CONFIG_LABEL]
    data = (
        client.CoreV1Api(api).read_namespaced_config_map(DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE).data
    )
    assert key.startswith("kgwe-h100-ts4-") and "replicas: 4" in data[key]
    log = client.CoreV1Api(api).read_namespaced_pod_log(
        _pods(api, f"app={DEVICE_PLUGIN_DAEMONSET}")[0].metadata.name,
        GPU_OPERATOR_NAMESPACE, container="config-manager",
    )  # fmt: skip
    assert f"Updating to config: {key}" in log  # NVIDIA's config-manager did the switch
    wait_for(
        "the rollout done",
        lambda: (
            "h100-ts4" in json.dumps(kgwe.repository().get("status"))
            and kgwe.condition("Ready").get("status") == "True"
        ),
        120,
    )
    [row] = _kgwe(kgwe, "nodes", NODE_NAME)["items"]
    assert row["sharing"] == {"strategy": "time-slicing", "replicas": 4, "config": key}
    assert row["devicePlugin"].startswith("Running")  # (config-manager may have refused a key once: named)
    # and back: the strategy removed, the node returns to the default config
    kgwe.commit({"sharing/h100-ts4.yaml": None}, "stop sharing")

    def unshared() -> bool:
        node = _node(api)
        return (node.status.allocatable or {}).get(GPU_RESOURCE) == "8" and node.metadata.labels.get(
            GPU_REPLICAS_LABEL
        ) == "1"

    wait_for("back to 8 whole GPUs", unshared, 600, describe=lambda: _state(api))


def _agent_periods(api: client.ApiClient) -> int:
    """How many periods the agent on the GPU node has finished (a `Node ... updated|unchanged` line each)."""
    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(
        GPU_OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/component=agent"
    ).items
    [agent] = [p for p in pods if p.spec.node_name == NODE_NAME]
    log = core.read_namespaced_pod_log(agent.metadata.name, GPU_OPERATOR_NAMESPACE)
    return sum(1 for line in log.splitlines() if f"Node {NODE_NAME} " in line)


def _refusals(core: client.CoreV1Api, ns: str, pod: str) -> list[str]:
    """Why the scheduler refused `pod` (its FailedScheduling Events)."""
    selector = f"involvedObject.name={pod},reason=FailedScheduling"
    return [e.message for e in core.list_namespaced_event(ns, field_selector=selector).items]


def _faults(api: client.ApiClient) -> dict[int, str]:
    raw = _node(api).metadata.annotations.get(health.ANNOTATION_KEY)
    return {i: f.reason for i, f in health.decode(raw).items()} if raw else {}


def test_an_injected_failure_is_marked_avoided_and_shown(kgwe, ml, busybox):
    """An uncorrectable ECC error with Xid 48 on GPU 3: the agent marks it with the reason, `kgwe health` and
    an Event show it, NVIDIA's plugin withdraws it (allocatable 8 -> 7), an 8-GPU pod is refused and a 7-GPU
    pod fits on the seven others. Then
    GPU 5 lost: the agent marks it and keeps it lost period after period; NVIDIA's plugin, restarted, cannot
    start with a lost GPU (the node advertises none, `kgwe nodes` shows why) and no GPU pod is placed
    there."""
    api, core = kgwe.api, client.CoreV1Api(kgwe.api)
    cgroup = f"/{CGROUP_ROOT}/"
    try:
        uuid = {g.index: g.uuid for g in mocknvml.profile_gpus()}
        assert _allocatable(api) == "8"
        nvidiastack.fail_and_withdraw(api, cgroup, 3, 48)
        wait_for("GPU 3 unhealthy", lambda: 3 in _faults(api), 180, describe=lambda: _state(api))
        wait_for("GPU 3 withdrawn", lambda: _allocatable(api) == "7", 120, describe=lambda: _state(api))
        assert _faults(api)[3] in ("ECCUncorrectable", "XID48")
        report = _kgwe(kgwe, "health", NODE_NAME)
        [row] = [r for r in report["items"] if r["gpu"] == 3]
        assert row["status"] == "Unhealthy" and "uncorrectable ECC" in row["message"], report
        events = core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={NODE_NAME},reason=GPUUnhealthy"
        )
        assert any("GPU 3" in e.message for e in events.items)
        # GPU 3 is never handed out: an 8-GPU pod is refused (NVIDIA's plugin offers 7 GPUs:
        # `Insufficient nvidia.com/gpu`; KGWE's extender counts GPU 3 taken: a reason starting `kgwe:`), and a
        # 7-GPU pod fits on the seven others
        core.create_namespaced_pod(ml, devices_pod("eight", 8, busybox.reference, NODE_NAME))
        reasons = wait_for(
            "the 8-GPU pod refused",
            lambda: _refusals(core, ml, "eight"),
            120,
            describe=lambda: _namespace_state(api, ml) + _state(api),
        )
        assert core.read_namespaced_pod("eight", ml).spec.node_name is None
        assert all("kgwe:" in m or f"Insufficient {GPU_RESOURCE}" in m for m in reasons), reasons
        core.delete_namespaced_pod("eight", ml, grace_period_seconds=0)
        core.create_namespaced_pod(ml, devices_pod("seven", 7, busybox.reference, NODE_NAME))
        wait_for(
            "the 7-GPU pod running",
            lambda: visible_devices(api, ml, "seven"),
            240,
            describe=lambda: _namespace_state(api, ml) + _state(api),
        )
        assert core.read_namespaced_pod("seven", ml).spec.scheduler_name == SCHEDULER_NAME
        held = [d for h in list_pod_resources(DEFAULT_SOCKET) if h.pod == "seven" for d in h.device_ids]
        assert sorted(held) == sorted(visible_devices(api, ml, "seven"))
        assert sorted(held) == sorted(u for i, u in uuid.items() if i != 3)
        assert _allocatable(api) == "7"
        core.delete_namespaced_pod("seven", ml, grace_period_seconds=0)
        # a lost GPU: NVIDIA's plugin cannot start with it, the agent keeps it lost
        mocknvml.inject_failure(5, "lost")
        nvidiastack.restart_device_plugin(cgroup)
        wait_for("GPU 5 lost", lambda: _faults(api).get(5) == "GPULost", 180, describe=lambda: _state(api))
        wait_for("the node without GPUs", lambda: _allocatable(api) == "0", 180, describe=lambda: _state(api))

        def shown() -> dict | None:
            [row] = _kgwe(kgwe, "nodes", NODE_NAME)["items"]
            return row if "ERROR_GPU_IS_LOST" in (row["devicePlugin"] or "") else None

        row = wait_for("kgwe nodes naming the plugin's failure", shown, 180, describe=lambda: _state(api))
        assert row["unhealthyGPUs"] == [3, 5]
        core.create_namespaced_pod(ml, devices_pod("waits", 1, busybox.reference, NODE_NAME))
        wait_for("the GPU pod refused", lambda: _refusals(core, ml, "waits"), 120)
        assert core.read_namespaced_pod("waits", ml).spec.node_name is None
        periods = _agent_periods(api)
        wait_for("five agent periods later", lambda: _agent_periods(api) >= periods + 5, 120)
        assert _faults(api).get(5) == "GPULost"
    finally:
        core.delete_collection_namespaced_pod(ml, grace_period_seconds=0)
        mocknvml.clear_failures()
        for pod in _pods(api, f"app={DEVICE_PLUGIN_DAEMONSET}"):  # a new pod rather than the back-off
            core.delete_namespaced_pod(pod.metadata.name, GPU_OPERATOR_NAMESPACE, grace_period_seconds=0)
    wait_for("every GPU back", lambda: _allocatable(api) == "8", 180, describe=lambda: _state(api))
