"""End to end over mutual TLS: the real kube-scheduler, started with the KubeSchedulerConfiguration KGWE
renders (enableHTTPS + tlsConfig with a client-certificate directory), calls the real `kgwe extender`
serving HTTPS with a required client certificate, and a GPU pod gets placed by it."""

from __future__ import annotations

import secrets
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from kgwe.localcluster.controlplane import default_scheduler_config
from kgwe.localcluster.extender_process import https_request, spawn_extender
from kgwe.localcluster.pki import extender_tls_flags, write_mtls_dirs
from kgwe.policy import load_repository
from kgwe.render.render import RenderOptions, render
from kgwe.resources import sample_repo_dir
from kgwe.vocab import SCHEDULER_NAME
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster


def eventually(check, what: str, timeout: float = 60.0):
    return wait_for(what, check, timeout, retry_on=(Exception,))  # an exception: not there yet


def https_status(port: int, ca: Path, client_dir: Path | None, path: str) -> int:
    return https_request(port, ca, client_dir, path)[0]


@pytest.fixture
def mtls_extender(control_plane, namespace, tmp_path) -> Iterator[tuple[int, Path]]:
    server_dir, client_dir = write_mtls_dirs(tmp_path)
    proc, port = spawn_extender(
        "--kubeconfig",
        str(control_plane.kubeconfig_path),
        "--namespace",
        namespace,
        *extender_tls_flags(server_dir),
    )
    ca = client_dir / "ca.crt"
    eventually(lambda: https_status(port, ca, client_dir, "/readyz") == 200, "extender ready")
    yield port, client_dir
    proc.terminate()
    proc.wait(timeout=10)


def test_kube_scheduler_places_a_gpu_pod_through_the_extender_over_mtls(
    control_plane, k8s_api, namespace, gpu_node, mtls_extender
) -> None:
    port, client_dir = mtls_extender
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        https_status(
            port, client_dir / "ca.crt", None, "/readyz"
        )  # no client certificate: refused in the handshake

    options = RenderOptions(
        extender_url=f"https://127.0.0.1:{port}", extender_client_cert_dir=str(client_dir)
    )
    rendered = render(load_repository(sample_repo_dir()), options=options)
    cm = next(o for o in rendered.objects if o["metadata"]["name"] == "kgwe-scheduler-config")
    config = yaml.safe_load(next(iter(cm["data"].values())))
    (extender,) = config["extenders"]
    assert extender["enableHTTPS"] is True and extender["tlsConfig"]["caFile"] == str(client_dir / "ca.crt")

    core = client.CoreV1Api(k8s_api)
    tag = {"kgwe-mtls": secrets.token_hex(3)}
    node = gpu_node("DGX-H100", labels=tag)
    eventually(
        lambda: https_status(port, client_dir / "ca.crt", client_dir, f"/debug/nodes/{node}") == 200,
        "node in the index",
    )
    control_plane.start_scheduler(config)
    try:
        resources = {"nvidia.com/gpu": "2"}
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name="over-mtls"),
            spec=client.V1PodSpec(
                scheduler_name=SCHEDULER_NAME,  # the rendered profile (the webhook sets it on a cluster)
                node_selector=tag,
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
        core.create_namespaced_pod(namespace, pod)
        bound = eventually(
            lambda: core.read_namespaced_pod("over-mtls", namespace).spec.node_name, "pod bound", timeout=90
        )
        assert bound == node

        eventually(lambda: _filter_calls(port, client_dir) >= 1, "kube-scheduler's filter call counted")
    finally:
        control_plane.start_scheduler(default_scheduler_config())


def _filter_calls(port: int, client_dir: Path) -> float:
    text = https_request(port, client_dir / "ca.crt", client_dir, "/metrics")[1].decode()
    for line in text.splitlines():
        if line.startswith('kgwe_extender_requests_total{code="200",verb="filter"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
