"""Attacks on the extender's port, against the real `kgwe extender` process: a client without a certificate
is refused when a client CA is configured, an oversized body gets a readable 413, connections are bounded
(the oldest unfinished one makes room), and a realistic 5,000-node request still fits the body cap."""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from kgwe.extender.app import MAX_REQUEST_BYTES as MAX_BODY
from kgwe.localcluster.extender_process import https_request, spawn_extender
from kgwe.localcluster.pki import extender_tls_flags, write_mtls_dirs

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = """\
apiVersion: kgwe.nvidia.io/v1
kind: GPUInventory
metadata: {name: transport}
spec:
  nodes:
    - {name: h1, gpus: 8, product: NVIDIA-H100-80GB-HBM3, topology: DGX-H100}
"""


def inventory(tmp: Path) -> str:
    path = tmp / "inventory.yaml"
    path.write_text(INVENTORY)
    return str(path)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_mtls_dirs(tmp_path_factory.mktemp("mtls"))


@pytest.fixture(scope="module")
def mtls_extender(tmp_path_factory, certs) -> Iterator[int]:
    server_dir, _ = certs
    proc, port = spawn_extender(
        "--inventory",
        inventory(tmp_path_factory.mktemp("ext-tls")),
        *extender_tls_flags(server_dir),
    )
    yield port
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def plain_extender(tmp_path_factory) -> Iterator[int]:
    proc, port = spawn_extender(
        "--inventory", inventory(tmp_path_factory.mktemp("ext")), "--max-connections", "4"
    )
    yield port
    proc.terminate()
    proc.wait(timeout=10)


def https_get(port: int, ca: Path, cert_dir: Path | None) -> int:
    return https_request(port, ca, cert_dir, "/healthz")[0]


def test_mtls_refuses_a_client_without_a_certificate(mtls_extender, certs) -> None:
    server_dir, client_dir = certs
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        https_get(mtls_extender, server_dir / "ca.crt", None)
    assert https_get(mtls_extender, server_dir / "ca.crt", client_dir) == 200


def test_mtls_refuses_a_certificate_from_another_ca(mtls_extender, certs, tmp_path) -> None:
    server_dir, _ = certs
    _, stranger = write_mtls_dirs(tmp_path)
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        https_get(mtls_extender, server_dir / "ca.crt", stranger)


def test_plain_http_to_the_tls_port_gets_nothing(mtls_extender) -> None:
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        conn = http.client.HTTPConnection("127.0.0.1", mtls_extender, timeout=10)
        conn.request("POST", "/filter", body=b"{}")
        conn.getresponse().read()


def test_tls_flags_are_checked(tmp_path) -> None:
    base = [sys.executable, "-m", "kgwe.cli", "extender", "--inventory", inventory(tmp_path)]
    for extra, needle in (
        (["--client-ca-file", "ca.crt"], "needs --tls-cert-file"),
        (["--tls-cert-file", "x.crt"], "both --tls-cert-file and --tls-key-file"),
        (["--tls-cert-file", "x.crt", "--tls-key-file", "x.key"], "cannot load the TLS files"),
    ):
        out = subprocess.run([*base, *extra], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert out.returncode != 0 and needle in out.stderr and "Traceback" not in out.stderr


def test_oversized_body_gets_a_readable_413_not_a_reset(plain_extender) -> None:
    """The client keeps sending its body after the answer; the answer must still arrive intact."""
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (64 * MAX_BODY)
    with socket.create_connection(("127.0.0.1", plain_extender), timeout=10) as s:
        with contextlib.suppress(OSError):  # the server may stop reading; the answer below is what counts
            s.sendall(head + b"x" * MAX_BODY)  # headers and a first MiB of body in one go
        time.sleep(0.2)  # the answer and the close happen while body bytes sit unread
        data = b""
        while True:
            part = s.recv(65536)  # a reset here (ConnectionResetError) is the bug
            if not part:
                break
            data += part
    assert data.startswith(b"HTTP/1.1 413 "), data[:200]
    assert b"exceeds the %d byte limit" % MAX_BODY in data


def test_connections_are_bounded(plain_extender) -> None:
    """Four connections mid-request fill the server (limit 4): a fifth is served, not refused, and the
    oldest unfinished one makes room (answered 503); idle keep-alive connections make room first."""
    held = [socket.create_connection(("127.0.0.1", plain_extender), timeout=10) for _ in range(4)]
    try:
        for s in held:
            s.sendall(b"POST /filter HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")  # and nothing more
            time.sleep(0.05)  # so that their ages differ
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", plain_extender), timeout=10) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert extra.recv(4096).startswith(b"HTTP/1.1 200 ")
        assert held[0].recv(4096).startswith(b"HTTP/1.1 503 ")  # the oldest went
    finally:
        for s in held:
            s.close()
    idle = [socket.create_connection(("127.0.0.1", plain_extender), timeout=10) for _ in range(8)]
    try:
        time.sleep(0.3)
        conn = http.client.HTTPConnection("127.0.0.1", plain_extender, timeout=10)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        for s in idle:
            s.close()


def fat_pod() -> dict:
    """A pod as kube-scheduler sends it, on the heavy side: 4 containers with 64 env vars each, 32 long
    annotations, labels, managedFields."""
    env = [{"name": f"SETTING_{i:03d}", "value": "v" * 48} for i in range(64)]
    container = {
        "name": "trainer",
        "image": "nvcr.io/nvidia/pytorch:24.10-py3",
        "command": ["torchrun", "--nproc-per-node=8", "train.py"],
        "env": env,
        "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"}},
        "volumeMounts": [{"name": f"data-{i}", "mountPath": f"/data/{i}"} for i in range(16)],
    }
    return {
        "metadata": {
            "name": "llm-pretrain-worker-0",
            "namespace": "ml-training",
            "uid": "0b7c5a3e-8d1f-4c1e-9a57-3f2d9e0c1a11",
            "labels": {f"example.com/label-{i}": "x" * 32 for i in range(16)},
            "annotations": {f"example.com/annotation-{i}": "y" * 200 for i in range(32)},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:containers": {}}}}] * 8,
        },
        "spec": {"containers": [container] * 4, "volumes": [{"name": f"data-{i}"} for i in range(16)]},
        "status": {"phase": "Pending"},
    }


def test_a_5000_node_request_with_a_fat_pod_fits_the_cap(plain_extender) -> None:
    names = [f"gpu-pool-{i // 1000}-dgx-h100-rack{i % 50:02d}-{i:05d}" for i in range(5000)]
    body = orjson.dumps({"Pod": fat_pod(), "Nodes": None, "NodeNames": names})
    assert len(body) < MAX_BODY / 2, len(body)  # room to spare for longer names
    conn = http.client.HTTPConnection("127.0.0.1", plain_extender, timeout=30)
    conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    reply = orjson.loads(resp.read())
    conn.close()
    assert resp.status == 200 and len(reply["FailedNodes"]) == 5000  # unknown nodes, answered
