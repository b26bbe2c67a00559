"""A GPUSharingStrategy end to end on the real control plane: the controller renders the device-plugin
ConfigMap and rolls `nvidia.com/device-plugin.config` out under the MIG gates (a node whose GPU is held waits;
drain is off), the device-plugin stand-in follows the label (allocatable ×4, GFD sharing labels), and pods
asking `nvidia.com/gpu: 1` go through the real kube-scheduler + KGWE extender and pack four to one GPU."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.request import urlopen

import orjson
import pytest
import yaml

from kgwe.localcluster.deviceplugin import DevicePluginStandIn
from kgwe.localcluster.extender_process import start_extender
from kgwe.policy.sharing_strategy import GPUSharingStrategy
from kgwe.reconcile.repository import RepositoryReconciler
from kgwe.render.sharing import config_key
from tests.harness.deployed import eventually
from tests.harness.kgwe_scheduler import LocalScheduler, local_config, rendered_config_text
from tests.harness.processes import stop
from tests.harness.waiting import nodes_watched, repeat_until

pytestmark = pytest.mark.cluster

SYSTEM_NS = "kgwe-system"
CONFIG_LABEL = "nvidia.com/device-plugin.config"


def sharing_yaml(pool: str) -> str:
    return f"""apiVersion: kgwe.nvidia.io/v1
kind: GPUSharingStrategy
metadata:
  name: {pool}
spec:
  nodeSelector:
    kgwe.nvidia.io/pool: {pool}
  mode: TimeSlicing
  replicas: 4
  rollout: {{maxUnavailable: 1, drain: false, pendingTimeout: 60s}}
"""


def pod(name: str, node: str | None = None, selector: dict | None = None) -> dict:
    spec: dict = {
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["schedulerName"] = "kgwe-scheduler"
        spec["nodeSelector"] = selector or {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def device_plugin(k8s_api) -> Iterator[DevicePluginStandIn]:
    with DevicePluginStandIn(k8s_api, delay_seconds=0.3) as plugin:
        yield plugin


def drive(rec: RepositoryReconciler, done, timeout_seconds: float = 120.0, note=lambda: ""):
    """Reconcile (as the interval would) until `done(outcome)`."""
    return repeat_until(
        "reconcile to settle",
        rec.reconcile,
        done,
        timeout_seconds,
        watch=nodes_watched(rec.cluster),
        describe=note,
    )


def node_view(port: int, name: str) -> dict:
    with urlopen(f"http://127.0.0.1:{port}/debug/nodes/{name}") as r:
        return orjson.loads(r.read())


def used_milli(port: int, node: str, total: int) -> list[int] | None:
    """The node's per-GPU used share once it adds up to `total` (the watch has caught up)."""
    used = node_view(port, node)["gpuUsedMilli"]
    return used if sum(used) == total else None


def test_time_slicing_rolls_out_safely_and_shared_pods_pack_four_to_a_gpu(
    k8s_api, e2e, gpu_node, device_plugin, control_plane
):
    core, pool, ns = e2e.core, e2e.pool, e2e.namespace
    nodes = [
        gpu_node("L40S-8-PCIE", name=f"{pool}-l{i}", labels={"kgwe.nvidia.io/pool": pool}) for i in (0, 1)
    ]
    idle, busy = nodes
    core.create_namespaced_pod(ns, pod("holder", node=busy))  # a GPU of `busy` is held: it must wait
    e2e.remote.commit({"policy/sharing.yaml": sharing_yaml(pool), "policy/scoring.yaml": e2e.SCORING})
    e2e.make_repository()
    rec = RepositoryReconciler(k8s_api, SYSTEM_NS, pool, cache_dir=e2e.tmp / "cache")
    key = config_key(GPUSharingStrategy.model_validate(yaml.safe_load(sharing_yaml(pool))))

    def idle_switched(outcome) -> bool:
        labels = e2e.labels(idle)
        return labels.get("nvidia.com/gpu.replicas") == "4" and bool(
            outcome and (outcome.rollout or {}).get(f"sharing/{pool}", {}).get("done") == 1
        )

    outcome = drive(rec, idle_switched)
    progress = outcome.rollout[f"sharing/{pool}"]
    assert progress["waitingBusy"] == [busy] and outcome.phase == "progressing"
    assert e2e.labels(idle)[CONFIG_LABEL] == key
    assert CONFIG_LABEL not in e2e.labels(busy)  # never switched under a running pod
    idle_node = core.read_node(idle)
    assert idle_node.status.allocatable["nvidia.com/gpu"] == "32"
    assert idle_node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-L40S-SHARED"
    assert idle_node.metadata.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    cm = core.read_namespaced_config_map("kgwe-device-plugin-config", "gpu-operator")
    assert set(cm.data) == {"default", key}

    # shared pods through the real kube-scheduler and the extender: four to one GPU, the fifth on another
    proc, port = start_extender(control_plane.kubeconfig_path, "--namespace", ns)
    scheduler = None
    try:
        eventually(lambda: len(node_view(port, idle)["gpuUsedMilli"]) == 8, "8 physical GPUs in the index")
        config = local_config(
            rendered_config_text("http://kgwe-extender.kgwe-system.svc:8080"),
            kubeconfig=control_plane.kubeconfig_path,
            extender_url=f"http://127.0.0.1:{port}",
            leader_elect=False,
        )
        scheduler = LocalScheduler(control_plane.binaries, control_plane.workdir / "sharing-sched", config)
        scheduler.start()
        on_idle = {"kubernetes.io/hostname": idle}
        for i in range(4):
            core.create_namespaced_pod(ns, pod(f"nb-{i}", selector=on_idle))

        def bound(count: int) -> bool:
            pods = [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith("nb-")]
            return sum(1 for p in pods if p.spec.node_name == idle) == count

        eventually(lambda: bound(4), "four shared pods bound", timeout=60)
        used = eventually(lambda: used_milli(port, idle, 1000), "four replicas accounted")
        assert sorted(used, reverse=True) == [1000] + [0] * 7  # one GPU holds all four replicas
        core.create_namespaced_pod(ns, pod("nb-4", selector=on_idle))
        eventually(lambda: bound(5), "fifth shared pod bound", timeout=60)
        used = eventually(lambda: used_milli(port, idle, 1250), "fifth replica accounted")
        assert sorted(used, reverse=True) == [1000, 250] + [0] * 6
    finally:
        if scheduler is not None:
            scheduler.stop()
        stop(proc)

    # the held GPU is released: the busy node switches too and the pool completes
    core.delete_namespaced_pod("holder", ns, grace_period_seconds=0)
    outcome = drive(rec, lambda o: o is not None and o.phase == "ready")
    assert e2e.labels(busy)[CONFIG_LABEL] == key and e2e.labels(busy)["nvidia.com/gpu.replicas"] == "4"
    assert [n for n, k in device_plugin.applies] == [idle, busy]  # each node restarted once
    assert core.read_node(busy).status.allocatable["nvidia.com/gpu"] == "32"

    # the strategy is removed: its nodes go back to `default` one at a time (nb-* still hold the idle node's
    # GPUs, so it waits), and its config stays in the ConfigMap while a node names it
    e2e.remote.commit({"policy/sharing.yaml": "# no sharing\n"}, "stop sharing")
    outcome = drive(rec, lambda o: o is not None and e2e.labels(busy).get(CONFIG_LABEL) == "default")
    assert outcome.rollout["sharing/default"]["waitingBusy"] == [idle]
    assert set(core.read_namespaced_config_map("kgwe-device-plugin-config", "gpu-operator").data) == {
        "default",
        key,
    }
    for i in range(5):
        core.delete_namespaced_pod(f"nb-{i}", ns, grace_period_seconds=0)
    drive(
        rec,
        lambda o: o is not None and o.phase == "ready" and e2e.labels(idle).get(CONFIG_LABEL) == "default",
    )
    for name in nodes:
        labels = e2e.labels(name)
        assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.product"]) == ("1", "NVIDIA-L40S")
        assert core.read_node(name).status.allocatable["nvidia.com/gpu"] == "8"
    assert set(core.read_namespaced_config_map("kgwe-device-plugin-config", "gpu-operator").data) == {
        "default"
    }
    assert device_plugin.errors == []  # no node ever named a config the ConfigMap lacked
