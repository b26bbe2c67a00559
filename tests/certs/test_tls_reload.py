"""Servers on certificate files that change under them, as a Secret volume does (the kubelet swaps a
`..data` symlink to a new directory): the webhook and the extender wait for files that do not exist yet
(not Ready, not exiting), then serve; a renewed certificate or client CA is used without a restart."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgwe import cli
from kgwe.certs import x509
from kgwe.localcluster.controlplane import free_port
from kgwe.resources import sample_repo_dir
from kgwe.tlsfiles import ServingTLS

NOW = dt.datetime.now(dt.UTC)
DAY = dt.timedelta(days=1)
ROOT = Path(__file__).resolve().parents[2]


def secret_volume(directory: Path, files: dict[str, bytes], generation: int) -> None:
    """Write `files` the way the kubelet updates a mounted Secret: a new timestamped directory, then an
    atomic rename of the `..data` symlink; each key is a symlink through `..data`."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"..{generation}"
    target.mkdir()
    for name, content in files.items():
        (target / name).write_bytes(content)
    tmp = directory / "..data_tmp"
    tmp.symlink_to(target.name)
    os.replace(tmp, directory / "..data")
    for name in files:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


def server_files(ca: x509.KeyPair, client_ca: bytes | None = None) -> dict[str, bytes]:
    pair = x509.issue(
        ca, "server", usage="server", now=NOW, valid=DAY, dns_names=["localhost"], ip_addresses=["127.0.0.1"]
    )
    files = {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem}
    if client_ca is not None:
        files["ca.crt"] = client_ca
    return files


def handshake(port: int, trust: bytes, client: x509.KeyPair | None = None, tmp: Path | None = None) -> bool:
    ctx = ssl.create_default_context(cadata=trust.decode())
    if client is not None:
        assert tmp is not None
        (tmp / "c.crt").write_bytes(client.cert_pem)
        (tmp / "c.key").write_bytes(client.key_pem)
        ctx.load_cert_chain(tmp / "c.crt", tmp / "c.key")
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,  # an IP: no SNI is sent
        ):
            tls.sendall(b"ping")
            return tls.recv(4) == b"pong"
    except (ssl.SSLError, ConnectionError, TimeoutError):
        return False


@pytest.fixture
def tls_server() -> Iterator:
    """A threaded TLS echo server on a ServingTLS (what the webhook does per connection)."""
    started: list = []

    def start(tls: ServingTLS) -> int:
        listener = socket.create_server(("127.0.0.1", 0))
        stop = threading.Event()

        def loop() -> None:
            listener.settimeout(0.2)
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                try:
                    with tls.current().wrap_socket(conn, server_side=True) as s:
                        if s.recv(4) == b"ping":
                            s.sendall(b"pong")
                except (ssl.SSLError, OSError):
                    pass
            listener.close()

        threading.Thread(target=loop, daemon=True).start()
        started.append(stop)
        return listener.getsockname()[1]

    yield start
    for stop in started:
        stop.set()


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path, tls_server):
    ca1 = x509.new_ca("ca-1", NOW, DAY)
    ca2 = x509.new_ca("ca-2", NOW, DAY)
    secret_volume(tmp_path / "tls", server_files(ca1), 1)
    tls = ServingTLS(tmp_path / "tls/tls.crt", tmp_path / "tls/tls.key", check_seconds=0)
    assert tls.wait(poll_seconds=0.01)
    port = tls_server(tls)
    assert handshake(port, ca1.cert_pem) and not handshake(port, ca2.cert_pem)
    secret_volume(tmp_path / "tls", server_files(ca2), 2)
    assert handshake(port, ca2.cert_pem) and not handshake(port, ca1.cert_pem)
    assert tls.reloads == 1


def test_a_broken_update_keeps_the_previous_certificate(tmp_path, tls_server):
    ca = x509.new_ca("ca", NOW, DAY)
    secret_volume(tmp_path / "tls", server_files(ca), 1)
    tls = ServingTLS(tmp_path / "tls/tls.crt", tmp_path / "tls/tls.key", check_seconds=0)
    assert tls.reload(force=True)
    port = tls_server(tls)
    other = x509.issue(ca, "x", usage="server", now=NOW, valid=DAY)
    secret_volume(tmp_path / "tls", {"tls.crt": server_files(ca)["tls.crt"], "tls.key": other.key_pem}, 2)
    assert handshake(port, ca.cert_pem)  # still the old, working pair
    assert tls.last_error is not None and "cannot load" in tls.last_error


def test_a_client_ca_dropped_from_the_bundle_stops_being_trusted(tmp_path, tls_server):
    server_ca = x509.new_ca("server-ca", NOW, DAY)
    old_ca, new_ca = x509.new_ca("old", NOW, DAY), x509.new_ca("new", NOW, DAY)
    old_client = x509.issue(old_ca, "kgwe-scheduler", usage="client", now=NOW, valid=DAY)
    new_client = x509.issue(new_ca, "kgwe-scheduler", usage="client", now=NOW, valid=DAY)
    files = server_files(server_ca, client_ca=old_ca.cert_pem + new_ca.cert_pem)  # during a rotation
    secret_volume(tmp_path / "tls", files, 1)
    d = tmp_path / "tls"
    tls = ServingTLS(d / "tls.crt", d / "tls.key", d / "ca.crt", check_seconds=0)
    assert tls.reload(force=True)
    port = tls_server(tls)
    trust = server_ca.cert_pem
    assert handshake(port, trust, old_client, tmp_path) and handshake(port, trust, new_client, tmp_path)
    assert not handshake(port, trust, None, tmp_path)  # no client certificate: refused
    secret_volume(d, {**files, "ca.crt": new_ca.cert_pem}, 2)  # the overlap ended
    assert handshake(port, trust, new_client, tmp_path)
    assert not handshake(port, trust, old_client, tmp_path)


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _until(check, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (result := check()) is not None:
            return result
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def _waiting_then_serving(argv: list[str], tmp_path: Path, files: dict[str, bytes], probe: int):
    """Start a server whose files are missing: alive, not ready, not exiting; then the Secret appears."""
    with (tmp_path / "server.log").open("wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    try:
        status = _until(lambda: _get(f"http://127.0.0.1:{probe}/readyz") if _alive(probe) else None)
        assert status[0] == 503 and "waiting for" in status[1]["error"]
        assert _get(f"http://127.0.0.1:{probe}/healthz")[0] == 200
        log = tmp_path / "server.log"
        _until(lambda: True if "waiting for the TLS certificate" in log.read_text() else None)
        for _ in range(5):  # for a while: a server waiting for its certificate keeps running
            time.sleep(0.3)
            assert proc.poll() is None, "a server waiting for its certificate must not exit"
        secret_volume(tmp_path / "tls", files, 1)
        _until(lambda: True if _get(f"http://127.0.0.1:{probe}/readyz")[0] == 200 else None)
        return proc
    except BaseException:
        proc.kill()
        raise


def _alive(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_the_webhook_waits_for_its_certificate_then_serves_and_follows_renewals(tmp_path):
    ca1, ca2 = x509.new_ca("ca-1", NOW, DAY), x509.new_ca("ca-2", NOW, DAY)
    port, probe = free_port(), free_port()
    argv = [
        sys.executable, "-m", "kgwe.cli", "webhook", f"--listen=127.0.0.1:{port}",
        f"--probe-listen=127.0.0.1:{probe}",
        f"--tls-cert-file={tmp_path}/tls/tls.crt", f"--tls-key-file={tmp_path}/tls/tls.key",
        "--insecure-any-client", "--tls-check-seconds=0.2",
    ]  # fmt: skip
    proc = _waiting_then_serving(argv, tmp_path, server_files(ca1), probe)
    try:
        ctx = ssl.create_default_context(cadata=ca1.cert_pem.decode())
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=5) as r:
            assert r.status == 200
        secret_volume(tmp_path / "tls", server_files(ca2), 2)
        ctx2 = ssl.create_default_context(cadata=ca2.cert_pem.decode())

        def renewed():
            try:
                with urllib.request.urlopen(
                    f"https://127.0.0.1:{port}/healthz", context=ctx2, timeout=5
                ) as r:
                    return r.status
            except urllib.error.URLError:
                return None

        assert _until(renewed, timeout=30) == 200  # within the reload check period (0.2 s), no restart
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf"])
def test_the_webhook_refuses_a_check_period_that_is_not_a_positive_number(tmp_path, capsys, seconds):
    argv = ["webhook", "--listen=127.0.0.1:0", f"--tls-cert-file={tmp_path}/tls.crt"]
    argv += [f"--tls-key-file={tmp_path}/tls.key", "--insecure-any-client", f"--tls-check-seconds={seconds}"]
    assert cli.main(argv) != 0
    assert "--tls-check-seconds must be a positive number" in capsys.readouterr().err


def test_the_standalone_extender_waits_for_its_mutual_tls_files_then_requires_client_certificates(tmp_path):
    ca = x509.new_ca("ca", NOW, DAY)
    client = x509.issue(ca, "kgwe-scheduler", usage="client", now=NOW, valid=DAY)
    port, probe = free_port(), free_port()
    d = tmp_path / "tls"
    argv = [
        sys.executable, "-m", "kgwe.cli", "extender", "--inventory",
        str(sample_repo_dir() / "inventory" / "prod.yaml"), f"--listen=127.0.0.1:{port}",
        f"--probe-listen=127.0.0.1:{probe}", f"--tls-cert-file={d}/tls.crt", f"--tls-key-file={d}/tls.key",
        f"--client-ca-file={d}/ca.crt",
    ]  # fmt: skip
    proc = _waiting_then_serving(argv, tmp_path, server_files(ca, client_ca=ca.cert_pem), probe)
    try:
        assert handshake_http(port, ca.cert_pem, client, tmp_path) == 200
        assert handshake_http(port, ca.cert_pem, None, tmp_path) is None  # no client certificate
    finally:
        proc.terminate()
        proc.wait(10)


def handshake_http(port: int, trust: bytes, client: x509.KeyPair | None, tmp: Path) -> int | None:
    ctx = ssl.create_default_context(cadata=trust.decode())
    if client is not None:
        (tmp / "c.crt").write_bytes(client.cert_pem)
        (tmp / "c.key").write_bytes(client.key_pem)
        ctx.load_cert_chain(tmp / "c.crt", tmp / "c.key")
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=5) as r:
            return r.status
    except (urllib.error.URLError, ssl.SSLError, ConnectionError):
        return None
