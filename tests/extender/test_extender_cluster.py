"""Against the real control plane: the watch index follows Nodes, the KGWE scheduler's bound Pods and the
kgwe-scoring ConfigMap; and end to end, a second kube-scheduler running the configuration KGWE renders
(profile kgwe-scheduler) calls the extender and places the pods that name it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.request import urlopen

import orjson
import pytest
from kubernetes import client

from kgwe.extender.engine import Engine
from kgwe.extender.index import ClusterIndex
from kgwe.localcluster.extender_process import start_extender
from tests.harness.deployed import eventually
from tests.harness.kgwe_scheduler import LocalScheduler, local_config, rendered_config_text
from tests.harness.processes import stop

pytestmark = pytest.mark.cluster


def gpu_pod(
    name: str,
    resources: dict,
    annotations: dict | None = None,
    node: str | None = None,
    selector: dict | None = None,
    scheduler: str | None = "kgwe-scheduler",
) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations or {}),
        spec=client.V1PodSpec(
            node_name=node,
            scheduler_name=scheduler,
            node_selector=selector,
            termination_grace_period_seconds=0,
            tolerations=[client.V1Toleration(operator="Exists")],
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    resources=client.V1ResourceRequirements(limits=resources, requests=resources),
                )
            ],
        ),
    )


@pytest.fixture(params=[True, False], ids=["verified-decisions", "kube-scheduler-only"])
def index(request, k8s_api, namespace) -> Iterator[ClusterIndex]:
    """Both watch shapes: bound and pending pods (decisions verified), bound pods only."""
    engine = Engine()
    idx = ClusterIndex(engine, namespace=namespace, api_client=k8s_api, verify_decisions=request.param)
    idx.start()
    assert idx.wait_ready(30), "index never listed nodes and pods"
    yield idx
    idx.stop()


def test_index_follows_nodes_pods_and_scoring_configmap(index, k8s_api, namespace, gpu_node) -> None:
    core = client.CoreV1Api(k8s_api)
    engine = index.engine
    node = gpu_node("DGX-H100")
    view = eventually(lambda: engine.node_view(node), "node in index")
    assert view["gpus"] == 8 and view["topology"] == "HGX-H100"
    assert view["product"] == "NVIDIA-H100-80GB-HBM3"

    core.create_namespaced_pod(namespace, gpu_pod("two", {"nvidia.com/gpu": "2"}, node=node))
    core.create_namespaced_pod(
        namespace,
        gpu_pod("share", {"nvidia.com/gpu.shared": "1"}, {"kgwe.nvidia.io/gpu-milli": "250"}, node=node),
    )
    eventually(
        lambda: sorted(engine.node_view(node)["gpuUsedMilli"]) == [0] * 5 + [250, 1000, 1000],
        "two whole GPUs and one 250-milli share accounted",
    )
    # a pod of another scheduler is not watched: the agent's annotation says which GPU it holds
    core.create_namespaced_pod(
        namespace, gpu_pod("foreign", {"nvidia.com/gpu": "1"}, node=node, scheduler="default-scheduler")
    )
    # a pod of KGWE's scheduler after it: once the index counts that one, it has seen everything before
    core.create_namespaced_pod(namespace, gpu_pod("marker", {"nvidia.com/gpu": "1"}, node=node))
    eventually(
        lambda: sorted(engine.node_view(node)["gpuUsedMilli"]) == [0] * 4 + [250, 1000, 1000, 1000],
        "the later pod counted, the foreign one not",
    )
    core.delete_namespaced_pod("marker", namespace, grace_period_seconds=0)
    eventually(
        lambda: sorted(engine.node_view(node)["gpuUsedMilli"]) == [0] * 5 + [250, 1000, 1000],
        "the later pod released",
    )
    client.CoreV1Api(k8s_api).patch_node(
        node, {"metadata": {"annotations": {"kgwe.nvidia.io/gpu-pods": f'{{"7": "{namespace}/foreign"}}'}}}
    )
    eventually(lambda: engine.node_view(node)["gpuUsedMilli"][7] == 1000, "the agent's holder counted")
    assert sorted(engine.node_view(node)["gpuUsedMilli"]) == [0] * 4 + [250, 1000, 1000, 1000]
    core.delete_namespaced_pod("foreign", namespace, grace_period_seconds=0)
    client.CoreV1Api(k8s_api).patch_node(
        node, {"metadata": {"annotations": {"kgwe.nvidia.io/gpu-pods": "{}"}}}
    )

    core.delete_namespaced_pod("two", namespace, grace_period_seconds=0)
    eventually(lambda: sorted(engine.node_view(node)["gpuUsedMilli"]) == [0] * 7 + [250], "pod release")

    doc = {"profiles": [{"name": "spread-team", "strategy": "Spread", "weights": {"topology": 10}}]}
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="kgwe-scoring"),
            data={"profiles.json": orjson.dumps(doc).decode()},
        ),
    )
    eventually(lambda: "spread-team" in engine.profiles, "profiles loaded")
    assert engine.profiles["spread-team"].topology == 10
    doc["profiles"][0]["strategy"] = "LeastLoaded"
    core.patch_namespaced_config_map(
        "kgwe-scoring", namespace, {"data": {"profiles.json": orjson.dumps(doc).decode()}}
    )
    eventually(lambda: engine.profiles["spread-team"].strategy == "LeastLoaded", "profiles reloaded")
    core.patch_namespaced_config_map("kgwe-scoring", namespace, {"data": {"profiles.json": "{broken"}})
    eventually(lambda: index.profile_error, "bad document reported")
    assert engine.profiles["spread-team"].strategy == "LeastLoaded"  # last good profiles kept

    core.delete_node(node)
    eventually(lambda: engine.node_view(node) is None, "node removed")


@pytest.fixture
def extender_process(control_plane, namespace) -> Iterator[int]:
    proc, port = start_extender(control_plane.kubeconfig_path, "--namespace", namespace)
    yield port
    stop(proc)


def kgwe_scheduler(control_plane, port: int) -> LocalScheduler:
    """A second kube-scheduler with the rendered configuration (extender URL local, no leader election)."""
    config = local_config(
        rendered_config_text("http://kgwe-extender.kgwe-system.svc:8080"),
        kubeconfig=control_plane.kubeconfig_path,
        extender_url=f"http://127.0.0.1:{port}",
        leader_elect=False,
    )
    return LocalScheduler(control_plane.binaries, control_plane.workdir / "kgwe-scheduler", config).start()


def node_view(port: int, name: str) -> dict:
    with urlopen(f"http://127.0.0.1:{port}/debug/nodes/{name}") as r:
        return orjson.loads(r.read())


def test_e2e_real_kube_scheduler_with_extender(
    control_plane, k8s_api, namespace, gpu_node, extender_process
) -> None:
    core = client.CoreV1Api(k8s_api)
    port = extender_process
    tag = {"kgwe-e2e": secrets.token_hex(3)}
    pairs = gpu_node("A100-PCIE-NVLINK-PAIRS", labels=tag)
    pcie = gpu_node("L40S-8-PCIE", labels=tag)
    for n in (pairs, pcie):
        eventually(lambda n=n: node_view(port, n), f"{n} in the extender's index")
    scheduler = kgwe_scheduler(control_plane, port)
    try:

        def bound(name: str) -> str | None:
            return core.read_namespaced_pod(name, namespace).spec.node_name

        # 1. a 2-GPU pod asking for NVLink lands on the node that offers an NVLink pair
        core.create_namespaced_pod(
            namespace,
            gpu_pod(
                "nvlink-pair",
                {"nvidia.com/gpu": "2"},
                {"kgwe.nvidia.io/topology-preference": "NVLinkOptimal"},
                selector=tag,
            ),
        )
        assert eventually(lambda: bound("nvlink-pair"), "2-GPU pod bound") == pairs

        # 2. a shared-GPU pod packs onto the partly used GPU of the first share
        core.create_namespaced_pod(
            namespace,
            gpu_pod(
                "share-a", {"nvidia.com/gpu.shared": "1"}, {"kgwe.nvidia.io/gpu-milli": "500"}, selector=tag
            ),
        )
        first = eventually(lambda: bound("share-a"), "first share bound")
        eventually(lambda: 500 in node_view(port, first)["gpuUsedMilli"], "first share in the index")
        core.create_namespaced_pod(
            namespace,
            gpu_pod(
                "share-b", {"nvidia.com/gpu.shared": "1"}, {"kgwe.nvidia.io/gpu-milli": "300"}, selector=tag
            ),
        )
        assert eventually(lambda: bound("share-b"), "second share bound") == first
        eventually(lambda: 800 in node_view(port, first)["gpuUsedMilli"], "both shares on one GPU")

        # 3. a pod that fits nowhere carries the extender's reasons in its events
        core.create_namespaced_pod(
            namespace,
            gpu_pod(
                "impossible",
                {"nvidia.com/gpu": "2"},
                {"kgwe.nvidia.io/min-bandwidth-gbps": "5000"},
                selector=tag,
            ),
        )

        def reasons() -> str | None:
            events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=impossible")
            text = " ".join(e.message or "" for e in events.items if e.reason == "FailedScheduling")
            return text if "kgwe:" in text else None

        message = eventually(reasons, "FailedScheduling event with the extender's reasons", timeout=60)
        assert "no set of 2 free GPUs with at least 5000 GB/s" in message
        assert bound("impossible") is None
    finally:
        scheduler.stop()


def filter_calls(port: int) -> float:
    """The extender's count of filter calls (what kube-scheduler asks for each try of a pod)."""
    with urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        text = r.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("kgwe_extender_requests_total{") and 'verb="filter"' in line
    )


def test_e2e_burst_of_shared_gpu_pods_never_overcommits_a_gpu(
    control_plane, k8s_api, namespace, gpu_node, extender_process
) -> None:
    """kube-scheduler cannot count nvidia.com/gpu.shared (ignoredByScheduler), so KGWE is the only guard of
    a GPU's shares. Nine 600-milli pods sent at once to an 8-GPU node are scheduled faster than their binds
    come back on the extender's watch; each decision must count at once, so exactly eight bind (one per
    GPU) and the ninth waits with the extender's reason."""
    core = client.CoreV1Api(k8s_api)
    port = extender_process
    tag = {"kgwe-burst": secrets.token_hex(3)}
    node = gpu_node("DGX-H100", labels=tag)
    eventually(lambda: node_view(port, node), f"{node} in the extender's index")
    scheduler = kgwe_scheduler(control_plane, port)
    try:
        share = {"nvidia.com/gpu.shared": "1"}
        milli = {"kgwe.nvidia.io/gpu-milli": "600"}
        names = [f"burst-{i}" for i in range(9)]
        with ThreadPoolExecutor(max_workers=9) as pool:
            list(
                pool.map(
                    lambda n: core.create_namespaced_pod(namespace, gpu_pod(n, share, milli, selector=tag)),
                    names,
                )
            )

        def placed() -> list[str] | None:
            pods = core.list_namespaced_pod(namespace).items
            bound = [p.metadata.name for p in pods if p.spec.node_name]
            failed = core.list_namespaced_event(namespace, field_selector="reason=FailedScheduling").items
            return bound if len(bound) == 8 and any("kgwe:" in (e.message or "") for e in failed) else None

        assert len(eventually(placed, "eight shares bound and one refused by the extender", timeout=60)) == 8
        eventually(
            lambda: node_view(port, node)["gpuUsedMilli"] == [600] * 8, "one 600-milli share on each GPU"
        )
        # Nothing else lands later: the refused pod is tried again on a cluster event, and refused again.
        before = filter_calls(port)
        core.patch_node(node, {"metadata": {"labels": {"kgwe-burst-poke": "1"}}})
        eventually(lambda: filter_calls(port) > before, "the refused pod tried again", timeout=60)
        assert sum(1 for p in core.list_namespaced_pod(namespace).items if p.spec.node_name) == 8
    finally:
        scheduler.stop()
