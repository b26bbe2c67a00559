"""Probes cannot be starved: hundreds of connections that dribble a request and never finish it, or pile up
headers, leave /healthz answering 200 on each of KGWE's three servers — the controller's port, the
extender's probe port and the admission webhook (TLS) — and the webhook's memory stays far below its
256 MiB limit. Probes come from another address than the attack, as a kubelet's come from the node."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgwe.admission.server import MAX_BODY_BYTES
from kgwe.gitops.webhook import ControllerHTTPServer
from kgwe.httpd import JSON, Limits, serve
from kgwe.localcluster.pki import write_pki
from tests.harness.http_attack import (
    ATTACKER,
    Dribblers,
    client_tls,
    peak_rss_mib,
    pile_bodies,
    pile_headers,
    probe,
    probe_while,
    rss_mib,
)
from tests.harness.processes import start_kgwe, stop

WEBHOOK_LIMIT_MIB = 256  # the webhook pod's memory limit in the chart


def served_through_an_attack(port: int, *, tls=None, dribblers: int = 300, rounds: int = 25) -> Dribblers:
    with Dribblers(port, dribblers, tls=tls) as attack:
        statuses = probe_while(port, rounds, tls=tls)
    assert statuses == [200] * rounds, statuses
    assert attack.opened >= dribblers
    return attack


def test_the_controller_port_answers_probes_through_slow_connections() -> None:
    srv = ControllerHTTPServer(
        ("127.0.0.1", 0),
        secret=b"s",
        on_push=lambda _: None,
        get_routes={"/healthz": lambda: (200, "text/plain", b"ok")},
    ).start()
    try:
        attack = served_through_an_attack(srv.port)
        assert attack.dropped_by_server > 0  # the table is bounded: the oldest dribblers made room
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def extender(tmp_path_factory: pytest.TempPathFactory, inventory_file: Path) -> Iterator[tuple[int, int]]:
    tmp = tmp_path_factory.mktemp("probe-extender")
    args = ["extender", "--inventory", str(inventory_file), "--listen", "127.0.0.1:0"]
    proc, probe_port = start_kgwe(
        [*args, "--probe-listen", "127.0.0.1:0"], tmp / "extender.log", r"probes .* on 127\.0\.0\.1:(\d+)"
    )
    yield proc.pid, probe_port
    stop(proc)


def test_the_extender_probe_port_answers_probes_through_slow_connections(extender) -> None:
    _, port = extender
    attack = served_through_an_attack(port)
    assert attack.dropped_by_server > 0


def test_a_client_that_never_reads_cannot_grow_the_extender(extender) -> None:
    """Pipelined requests whose answers are never read: the server stops reading that client once its
    answers back up, instead of answering everything into memory, and drops it at the deadline."""
    pid, port = extender
    before = rss_mib(pid)
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=1, source_address=(ATTACKER, 0)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sent, until = 0, time.monotonic() + 12
        while time.monotonic() < until:  # each request is answered with a few KiB
            try:
                sent += s.send(request * 1024)
            except TimeoutError:  # the server stopped reading: what is being tested
                pass
            except OSError:  # ...and then dropped the connection
                break
        assert probe(port) == 200
        grown = rss_mib(pid) - before
    print(f"extender RSS growth with {sent / 2**20:.1f} MiB of unread pipelined requests: {grown:.1f} MiB")
    assert grown < 16, (sent, grown)


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    tmp = tmp_path_factory.mktemp("probe-webhook")
    pki = write_pki(tmp / "pki")
    args = ["webhook", "--listen", "127.0.0.1:0", "--tls-cert-file", str(pki.serving_cert)]
    args += ["--tls-key-file", str(pki.serving_key), "--insecure-any-client"]
    proc, port = start_kgwe(args, tmp / "webhook.log", r"listening on 127\.0\.0\.1:(\d+)")
    yield proc.pid, port
    stop(proc)


def test_the_webhook_answers_probes_through_slow_tls_connections(webhook) -> None:
    pid, port = webhook
    served_through_an_attack(port, tls=client_tls())
    print(f"webhook RSS after 300 dribbling TLS connections: {rss_mib(pid):.1f} MiB")


def test_the_webhook_answers_probes_through_unfinished_handshakes(webhook) -> None:
    _, port = webhook
    tls = client_tls()
    with Dribblers(port, 300, tls=tls, handshake=False):
        statuses = probe_while(port, 25, tls=tls)
    assert statuses == [200] * 25, statuses


def test_the_webhook_cuts_dribblers_at_the_header_deadline(webhook) -> None:
    """Fewer dribblers than the table holds, so nothing is evicted: each is cut by the whole-header deadline
    (a byte every half second would keep a per-read timeout waiting forever)."""
    _, port = webhook
    tls = client_tls()
    with Dribblers(port, 20, tls=tls) as attack:
        deadline = threading.Event()
        deadline.wait(8.0)  # longer than the 5 s header deadline
    assert attack.dropped_by_server >= 20, attack
    assert any(" 408 " in line for line in attack.answers), attack.answers


def test_the_webhook_memory_stays_bounded_under_piled_headers_and_bodies(webhook) -> None:
    """Peak resident memory over every attack of this module so far, then piled headers and bodies."""
    pid, port = webhook
    tls = client_tls()
    held = pile_headers(port, 48, tls=tls)  # 48 x 99 lines x 60 kB = 285 MB offered
    held += pile_bodies(port, 32, body_bytes=MAX_BODY_BYTES, tls=tls)  # 32 x 4 MiB, all but a byte
    try:
        assert probe(port, tls=tls) == 200
        peak = peak_rss_mib(pid)
    finally:
        for s in held:
            s.close()
    print(f"webhook peak RSS under piled headers and bodies: {peak:.1f} MiB (limit {WEBHOOK_LIMIT_MIB} MiB)")
    assert peak < WEBHOOK_LIMIT_MIB / 2, peak


# -- the one server, under random byte streams ----------------------------------------------------------


@pytest.fixture(scope="module")
def small_server() -> Iterator[int]:
    """The shared server with a small table (6 connections) and short deadlines, on loopback."""
    ready = threading.Event()
    box: dict = {}

    def handler(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        return (200, b"ok", b"text/plain") if path == "/healthz" else (404, b'{"error":"no"}', JSON)

    def run() -> None:
        async def main() -> None:
            box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
            await serve(
                handler,
                "127.0.0.1",
                0,
                limits=Limits(max_connections=6, header_timeout_seconds=1.0, request_timeout_seconds=2.0),
                stop=box["stop"],
                started=lambda port: (box.__setitem__("port", port), ready.set()),
            )

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield box["port"]
    box["loop"].call_soon_threadsafe(box["stop"].set)
    thread.join(10)


_FRAGMENTS = st.sampled_from(
    [
        b"GET /healthz HTTP/1.1\r\n",
        b"POST /x HTTP/1.1\r\nContent-Length: 100000\r\n\r\n",
        b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nab",
        b"Host: x\r\n",
        b"\r\n",
        b"\r\n\r\n",
        b"Transfer-Encoding: chunked\r\n",
        b"GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n",
        b"X-Long: " + b"y" * 20_000,
    ]
)
_CHUNK = st.one_of(st.binary(min_size=1, max_size=64), _FRAGMENTS)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(streams=st.lists(st.lists(_CHUNK, min_size=1, max_size=6), min_size=1, max_size=14))
def test_random_byte_streams_never_starve_healthz(small_server, streams: list[list[bytes]]) -> None:
    held = []
    try:
        for chunks in streams:
            s = socket.create_connection(("127.0.0.1", small_server), timeout=5, source_address=(ATTACKER, 0))
            held.append(s)
            for chunk in chunks:
                try:
                    s.sendall(chunk)
                except OSError:  # the server answered and closed: fine
                    break
        assert probe(small_server) == 200
    finally:
        for s in held:
            s.close()


def test_piled_headers_do_not_grow_the_server(tmp_path: Path) -> None:
    """Headers past the cap get a 431 at once; nothing waits for the rest."""
    ready = threading.Event()
    box: dict = {}

    def run() -> None:
        async def main() -> None:
            box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
            await serve(
                lambda m, p, b: (200, b"ok", b"text/plain"),
                "127.0.0.1",
                0,
                stop=box["stop"],
                started=lambda port: (box.__setitem__("port", port), ready.set()),
            )

        asyncio.run(main())

    threading.Thread(target=run, daemon=True).start()
    assert ready.wait(10)
    try:
        with socket.create_connection(("127.0.0.1", box["port"]), timeout=5) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nX-Pile: " + b"p" * 40_000)
            answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
