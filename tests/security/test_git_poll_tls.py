"""The in-process ref poll (kgwe.gitops.refs) holds `spec.timeout` over https as over http: a Git server
that trickles its TLS handshake, its status line and headers, or `100 Continue` replies without end is cut
off at the deadline. (Its watchdog used to shut the raw socket down, which TLS had already taken over, so
over https nothing happened and the poll ran as long as the server liked.)"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kgwe.gitops.gitcmd import LOOPBACK_NETWORKS
from kgwe.gitops.refs import ADVERTISEMENT_TYPE, MAX_INTERIM_REPLIES, advertised_ref
from kgwe.localcluster.pki import write_pki

STEP_SECONDS = 0.05  # between two pieces the server sends: far inside any per-read timeout
DEADLINE_SECONDS = 0.5


def trickled_headers() -> list[bytes]:
    """200 bytes of a status line and an unfinished header, one at a time: 10 s in all."""
    return [bytes([b]) for b in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 183]


def endless_continues() -> list[bytes]:
    """A `100 Continue` every step (an interim reply http.client skips and reads past), 10 s in all."""
    return [b"HTTP/1.1 100 Continue\r\n\r\n"] * 200


def trickled_body() -> list[bytes]:
    """A valid advertisement's start, then one more pkt-line every step, never its end."""
    head = b"001e# service=git-upload-pack\n0000"
    start = (
        b"HTTP/1.1 200 OK\r\nContent-Type: " + ADVERTISEMENT_TYPE.encode() + b"\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(head), head)
    )
    lines = []
    for n in range(200):
        line = b"%040x refs/heads/b%08d\n" % (n, n)
        pkt = b"%04x%s" % (len(line) + 4, line)
        lines.append(b"%x\r\n%s\r\n" % (len(pkt), pkt))
    return [start, *lines]


def trickled_body_then_close() -> list[bytes]:
    """The same with `Connection: close` and a Content-Length never reached (http.client hands the socket
    to the response: the deadline must still reach it)."""
    start, *lines = trickled_body()
    head = start.split(b"\r\n\r\n", 1)[1].split(b"\r\n")[1]
    start = (
        b"HTTP/1.1 200 OK\r\nContent-Type: " + ADVERTISEMENT_TYPE.encode() + b"\r\n"
        b"Connection: close\r\nContent-Length: 1000000\r\n\r\n" + head
    )
    return [start, *(line.split(b"\r\n")[1] for line in lines)]


@dataclass
class SlowServer:
    """Sends its script a piece per step after reading the request; `cut_off` is set when the client went
    away before the script ended (a send failed)."""

    context: ssl.SSLContext | None
    script: list[bytes]
    relay_handshake: bool = False  # trickle every byte the server sends, the TLS handshake included
    cut_off: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            if self.relay_handshake:
                self._relay(conn)
                return
            try:
                sock = self.context.wrap_socket(conn, server_side=True) if self.context else conn
                sock.recv(65536)
                for piece in self.script:
                    if self.stop.wait(STEP_SECONDS):
                        return
                    sock.sendall(piece)
            except OSError:
                self.cut_off.set()

    def _relay(self, client: socket.socket) -> None:
        """Between the client and a TLS server of the same script: what the client sends goes on at once,
        what the server sends comes back a byte per step, so the handshake alone outlasts any deadline."""
        inner = SlowServer(self.context, self.script)
        try:
            with socket.create_connection(("127.0.0.1", inner.port)) as upstream:
                client.settimeout(STEP_SECONDS)
                upstream.settimeout(STEP_SECONDS)
                for _ in range(200):
                    if self.stop.is_set():
                        return
                    try:
                        data = client.recv(65536)
                        if not data:
                            self.cut_off.set()
                            return
                        upstream.sendall(data)
                    except TimeoutError:
                        pass
                    try:
                        byte = upstream.recv(1)
                    except TimeoutError:
                        continue
                    client.sendall(byte)
        except OSError:
            self.cut_off.set()
        finally:
            inner.close()

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        self.thread.join(timeout=15)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, str]:
    pki = write_pki(Path(tmp_path_factory.mktemp("pki")))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.serving_cert, pki.serving_key)
    return context, str(pki.ca_cert)


@pytest.fixture
def servers() -> Iterator[list[SlowServer]]:
    made: list[SlowServer] = []
    yield made
    for server in made:
        server.close()


def poll(
    scheme: str, server: SlowServer, ca_file: str | None, timeout_seconds: float = DEADLINE_SECONDS
) -> str | None:
    return advertised_ref(
        f"{scheme}://127.0.0.1:{server.port}/policy.git",
        "refs/heads/main",
        credentials=None,
        ca_file=ca_file,
        allowed_networks=LOOPBACK_NETWORKS,
        timeout_seconds=timeout_seconds,
    )


@pytest.mark.parametrize("scheme", ["https", "http"])
@pytest.mark.parametrize(
    "script", [trickled_headers, endless_continues, trickled_body, trickled_body_then_close]
)
def test_a_slow_server_is_cut_off_at_the_deadline(scheme, script, tls, servers) -> None:
    context, ca_file = tls
    server = SlowServer(context if scheme == "https" else None, script())
    servers.append(server)
    assert poll(scheme, server, ca_file) is None  # no answer in time: git, with its own deadline, is asked
    server.thread.join(timeout=15)
    assert server.cut_off.is_set()  # the client went away long before the script's 10 s were over


def test_a_trickled_tls_handshake_is_cut_off_at_the_deadline(tls, servers) -> None:
    context, ca_file = tls
    server = SlowServer(context, trickled_headers(), relay_handshake=True)
    servers.append(server)
    assert poll("https", server, ca_file) is None
    server.thread.join(timeout=15)
    assert server.cut_off.is_set()


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_interim_replies_are_counted(scheme, tls, servers) -> None:
    """However fast they come, at most MAX_INTERIM_REPLIES interim replies are read before the poll gives
    up: the deadline bounds their time, this their number. Here the deadline (60 s) outlasts the server's
    10 s of replies, so only the count can end the poll before the server is done."""
    context, ca_file = tls
    burst = [b"HTTP/1.1 100 Continue\r\n\r\n" * (MAX_INTERIM_REPLIES + 1), *endless_continues()]
    server = SlowServer(context if scheme == "https" else None, burst)
    servers.append(server)
    assert poll(scheme, server, ca_file, timeout_seconds=60) is None
    server.thread.join(timeout=15)
    assert server.cut_off.is_set()
