"""pytest plugin: one real local control plane per test session, a fresh namespace per test.

Fixtures:
  control_plane  (session)  a started ControlPlane (binaries built on first use via hack/cluster-bins.sh)
  k8s_api        (session)  kubernetes ApiClient authenticated as cluster admin
  namespace      (function) name of a fresh namespace (with its `default` ServiceAccount); its pods are
                            force-deleted and the namespace deleted afterwards
  gpu_node       (function) factory: gpu_node("DGX-H100", **node_manifest options) -> node name, Ready;
                            deleted afterwards
  mig_manager    (function) a running MigManagerStandIn (delay 0.2 s), stopped afterwards
  local_cluster  (function) what `kgwe cluster up` runs, shared by the session (LocalCluster): the
                            host's real node (containerd, kubelet, kube-proxy, CNI bridge) with CoreDNS, kwok
                            GPU nodes from sample-repo's inventory, the GPU Operator's stand-ins, the busybox
                            test image imported (`busybox`); started on first use (needs root)
  real_node_cluster (function) its ControlPlane (`.node` is the RealNode)
  real_node_namespace (function) a fresh namespace on that cluster, deleted afterwards
  host_free_of_real_node (function) stops the session's real node first (the next test that asks for it
                            starts it again): for tests that start their own (`kgwe cluster up`)
  gpu_cluster    (function) the session's local cluster with the real node as a GPU node (`kgwe cluster up
                            --gpu-profile h100`: NVIDIA's device plugin, GFD and config-manager on NVIDIA's
                            mock NVML); asking for it restarts a cluster started without that profile, and
                            asking for `local_cluster` afterwards restarts it without
  new_control_plane (session) factory of control planes of a module's or test's own, as context managers:
                            `with new_control_plane(feature_gates=...) as cp:` (for feature gates, or tests
                            that change cluster-wide objects)

Every test that uses them is marked `cluster`, the real-node ones also `realnode`
(tests.harness.pytest_lanes, which also keeps the tests of one control plane on one xdist worker). A missing
Go toolchain, a broken build, not being root or another real node holding the host (waited for up to
REAL_NODE_LOCK_WAIT_SECONDS) fails those tests with the reason; they are never skipped.
When a cluster test fails, its report shows the tail of each component log and the directory the full logs
are kept in.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.errors import KgweError
from kgwe.localcluster import gpunodes
from kgwe.localcluster.cluster import ClusterRequest, LocalCluster
from kgwe.localcluster.controlplane import ControlPlane, ControlPlaneError, find_binaries
from kgwe.localcluster.migmanager import MigManagerStandIn
from tests.harness.realnode import PodImage, busybox_image
from tests.harness.waiting import wait_for

_state: dict[str, Any] = {"control_plane": None}
# Another test session on this host may hold the one real node (several checkouts share a machine): wait
# for it this long before failing with who holds it.
REAL_NODE_LOCK_WAIT_SECONDS = 900.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    real: RealNodeSession | None = _state.get("real_node")
    local = real.cluster if real is not None and item.get_closest_marker("realnode") else None
    cp: ControlPlane | None = local.cp if local is not None else None
    cp = cp or _state["control_plane"]
    if report.failed and cp is not None and cp.workdir is not None and item.get_closest_marker("cluster"):
        kept = cp.keep_logs()
        report.sections.append(
            ("control plane logs", f"full logs will be kept in {kept}\n{cp.log_tails(lines=15)}")
        )


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    problem = None
    try:
        cp = ControlPlane(find_binaries(build=True))
        cp.start()
    except ControlPlaneError as exc:
        problem = str(exc)
    if problem is not None:
        pytest.fail(f"local Kubernetes control plane unavailable: {problem}", pytrace=False)
    _state["control_plane"] = cp
    try:
        yield cp
    finally:
        _state["control_plane"] = None
        kept = cp._keep_logs_to
        cp.stop()
        if kept is not None:
            print(f"\nkgwe: control plane logs of failed tests kept in {kept}")


@contextlib.contextmanager
def _started_control_plane(**options: Any) -> Iterator[ControlPlane]:
    """A control plane of its own, started here (a failure fails the test with the reason), stopped after."""
    try:
        cp = ControlPlane(find_binaries(build=True), **options)
        cp.start()
    except ControlPlaneError as exc:
        pytest.fail(f"local Kubernetes control plane unavailable: {exc}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def new_control_plane() -> Callable[..., contextlib.AbstractContextManager[ControlPlane]]:
    """`with new_control_plane(**ControlPlane options) as cp:` a control plane of the caller's own."""
    return _started_control_plane


@pytest.fixture(scope="session")
def k8s_api(control_plane: ControlPlane) -> client.ApiClient:
    return control_plane.api_client()


def _wait_default_service_account(
    core: client.CoreV1Api, namespace: str, timeout_seconds: float = 30
) -> None:
    """kube-controller-manager's serviceaccount controller creates it a moment after the namespace."""
    wait_for(
        f"the `default` ServiceAccount in {namespace}",
        lambda: core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items,
        timeout_seconds,
    )


def delete_namespace(core: client.CoreV1Api, name: str) -> None:
    """Force-delete the namespace's pods and delete it; kube-controller-manager's namespace controller
    removes the rest and finalizes it in the background (kwok nodes have no kubelet to wait for)."""
    try:
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def namespace(k8s_api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    core = client.CoreV1Api(k8s_api)
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base or 't'}-{secrets.token_hex(3)}"
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"kgwe.nvidia.io/test": "true"}))
    )
    _wait_default_service_account(core, name)
    yield name
    delete_namespace(core, name)


@pytest.fixture
def gpu_node(k8s_api: client.ApiClient) -> Iterator[Callable[..., str]]:
    created: list[str] = []

    def make(
        machine: str = "DGX-H100",
        name: str | None = None,
        ready_timeout_seconds: float = 60,
        **manifest_options: Any,
    ) -> str:
        node_name = name or f"{machine.lower()}-{secrets.token_hex(3)}"
        gpunodes.create_gpu_node(k8s_api, node_name, machine, **manifest_options)
        created.append(node_name)
        gpunodes.wait_nodes_ready(k8s_api, [node_name], timeout_seconds=ready_timeout_seconds)
        return node_name

    yield make
    gpunodes.delete_nodes(k8s_api, created)


@pytest.fixture
def mig_manager(k8s_api: client.ApiClient) -> Iterator[MigManagerStandIn]:
    with MigManagerStandIn(k8s_api, delay_seconds=0.2) as manager:
        yield manager


class RealNodeSession:
    """The session's local cluster (what `kgwe cluster up` runs: the control plane, the host's real node with
    CoreDNS, kwok GPU nodes from sample-repo's inventory, the GPU Operator's stand-ins) with the busybox test
    image imported: started when a test first asks, stopped when a test needs the host free (one real node
    per host), started again by the next test that asks."""

    def __init__(self) -> None:
        self.cluster: LocalCluster | None = None
        self._image: PodImage | None = None
        self._directory: Path | None = None

    @property
    def image(self) -> PodImage:
        if self._image is None:
            self._image = busybox_image()
        return self._image

    def ensure(self, gpu_profile: str = "") -> LocalCluster:
        if self.cluster is not None and self.cluster.request.gpu_profile != gpu_profile:
            self.release()
        if self.cluster is None:
            self._directory = Path(tempfile.mkdtemp(prefix="kgwe-local-cluster-"))
            request = ClusterRequest(
                directory=str(self._directory),
                images=[str(self.image.archive)],
                lock_wait_seconds=REAL_NODE_LOCK_WAIT_SECONDS,
                gpu_profile=gpu_profile,
            )
            cluster = LocalCluster(request, say=lambda _: None)
            try:
                cluster.start()
            except (KgweError, RuntimeError) as exc:
                cluster.stop()
                pytest.fail(f"the local cluster with its real node is unavailable: {exc}", pytrace=False)
            self.cluster = cluster
        return self.cluster

    def release(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.stop()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None


@pytest.fixture(scope="session")
def _real_node_session() -> Iterator[RealNodeSession]:
    session = RealNodeSession()
    _state["real_node"] = session
    try:
        yield session
    finally:
        _state["real_node"] = None
        session.release()


@pytest.fixture
def local_cluster(_real_node_session: RealNodeSession) -> LocalCluster:
    """The session's local cluster; `local_cluster.import_image(archive)` imports more images (a KGWE
    image also under the chart's default reference)."""
    return _real_node_session.ensure()


GPU_PROFILE = "h100"  # the tests' GPU node: NVIDIA's mock HGX H100


@pytest.fixture
def gpu_cluster(_real_node_session: RealNodeSession) -> LocalCluster:
    """The session's local cluster whose real node is a GPU node run by NVIDIA's code (GPU_PROFILE)."""
    return _real_node_session.ensure(gpu_profile=GPU_PROFILE)


@pytest.fixture
def real_node_cluster(local_cluster: LocalCluster) -> ControlPlane:
    """The local cluster's control plane (`.node` is the real node)."""
    assert local_cluster.cp is not None
    return cast(ControlPlane, local_cluster.cp)


@pytest.fixture
def busybox(_real_node_session: RealNodeSession) -> PodImage:
    """The test image the real node has imported (reference and archive)."""
    return _real_node_session.image


@pytest.fixture
def real_node_namespace(real_node_cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace on the real-node cluster, deleted afterwards (its pods really stop)."""
    core = client.CoreV1Api(real_node_cluster.api_client())
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base or 't'}-{secrets.token_hex(3)}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    _wait_default_service_account(core, name)
    yield name
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)


@pytest.fixture
def host_free_of_real_node(_real_node_session: RealNodeSession) -> None:
    _real_node_session.release()
