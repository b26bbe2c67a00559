"""Attackers for KGWE's HTTP ports, for the attack tests and bench/http_attack.py: connections that dribble
a request byte by byte and never finish it (reopened as soon as the server drops them, so the server's
table stays full), connections that pile up huge headers, and a probe that asks what the kubelet asks."""

from __future__ import annotations

import contextlib
import http.client
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ATTACKER = "127.0.0.1"  # a pod's address
KUBELET = "127.0.0.2"  # the node's address, where probes come from (any 127/8 address reaches loopback)
_START = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "


@dataclass
class Dribblers:
    """`count` connections from `source`, each starting a request and then sending one more header byte
    every `interval_seconds` (so a per-read timeout never fires); whatever the server closes is opened
    again. `tls`: finish a TLS handshake first (with `handshake=False`, send half a ClientHello instead)."""

    port: int
    count: int
    source: str = ATTACKER
    interval_seconds: float = 0.5
    tls: ssl.SSLContext | None = None
    handshake: bool = True
    opened: int = 0
    dropped_by_server: int = 0
    refused: int = 0
    answers: dict[str, int] = field(default_factory=dict)  # first status line bytes -> count
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Dribblers:
        self._thread = threading.Thread(target=self._run, name="dribblers", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 120
        while self.opened < self.count and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _open(self) -> socket.socket | None:
        try:
            raw = socket.create_connection(
                ("127.0.0.1", self.port), timeout=5, source_address=(self.source, 0)
            )
        except OSError:
            self.refused += 1
            return None
        sock: socket.socket = raw
        try:
            if self.tls is not None and self.handshake:
                sock = self.tls.wrap_socket(raw, server_hostname="localhost")
                sock.sendall(_START)
            elif self.tls is not None:
                raw.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello's first bytes
            else:
                raw.sendall(_START)
        except OSError:
            self.refused += 1
            raw.close()
            return None
        sock.setblocking(False)
        self.opened += 1
        return sock

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        socks: dict[socket.socket, float] = {}

        def add() -> None:
            s = self._open()
            if s is not None:
                socks[s] = time.monotonic()
                sel.register(s, selectors.EVENT_READ)

        while len(socks) < self.count and not self._stop.is_set():
            add()
        while not self._stop.is_set():
            for key, _ in sel.select(timeout=0.05):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                try:
                    data = s.recv(4096)
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                except OSError:
                    data = b""
                if data.startswith(b"HTTP/"):
                    line = data.split(b"\r\n", 1)[0].decode(errors="replace")
                    self.answers[line] = self.answers.get(line, 0) + 1
                self.dropped_by_server += 1
                sel.unregister(s)
                del socks[s]
                s.close()
            now = time.monotonic()
            for s, last in list(socks.items()):
                if now - last >= self.interval_seconds:
                    with contextlib.suppress(OSError, ssl.SSLError):
                        s.send(b"a" if self.tls is None or self.handshake else b"\x00")
                    socks[s] = now
            while len(socks) < self.count and not self._stop.is_set():
                add()
        for s in socks:
            s.close()
        sel.close()


def pile_headers(
    port: int,
    connections: int,
    *,
    line_bytes: int = 60_000,
    lines: int = 99,
    tls: ssl.SSLContext | None = None,
    source: str = ATTACKER,
) -> list[socket.socket]:
    """Open `connections` connections that each send `lines` header lines of `line_bytes` and never the
    blank line that ends the headers; returns them still open (the caller closes them)."""
    held = []
    line = b"X-Pile: " + b"p" * (line_bytes - 10) + b"\r\n"
    for _ in range(connections):
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
            sock = tls.wrap_socket(raw, server_hostname="localhost") if tls is not None else raw
            sock.sendall(b"POST /mutate-pods HTTP/1.1\r\nHost: x\r\n")
            for _ in range(lines):
                sock.sendall(line)
        except OSError:  # the server answered 431 and closed: what a bounded server does
            continue
        held.append(sock)
    return held


def pile_bodies(
    port: int,
    connections: int,
    *,
    body_bytes: int,
    tls: ssl.SSLContext | None = None,
    source: str = ATTACKER,
) -> list[socket.socket]:
    """Open `connections` connections that each promise a body of `body_bytes`, send all of it but the last
    byte and stop; returns them still open (the caller closes them)."""
    held = []
    chunk = b"b" * 65536
    for _ in range(connections):
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
            sock = tls.wrap_socket(raw, server_hostname="localhost") if tls is not None else raw
            sock.sendall(b"POST /mutate-pods HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % body_bytes)
            left = body_bytes - 1
            while left > 0:
                sock.sendall(chunk[: min(left, len(chunk))])
                left -= min(left, len(chunk))
        except OSError:  # evicted: the server made room for another
            continue
        held.append(sock)
    return held


def probe(
    port: int,
    path: str = "/healthz",
    *,
    tls: ssl.SSLContext | None = None,
    source: str = KUBELET,
    timeout_seconds: float = 5.0,
    headers: dict[str, str] | None = None,
) -> int | str:
    """GET path as a kubelet probe does (a fresh connection); the status, or the error's name."""
    conn: http.client.HTTPConnection
    if tls is not None:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", port, context=tls, timeout=timeout_seconds, source_address=(source, 0)
        )
    else:
        conn = http.client.HTTPConnection(
            "127.0.0.1", port, timeout=timeout_seconds, source_address=(source, 0)
        )
    try:
        conn.request("GET", path, headers={"Connection": "close", **(headers or {})})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        conn.close()


def probe_while(
    port: int, rounds: int, *, tls: ssl.SSLContext | None = None, pause_seconds: float = 0.1
) -> list:
    """`rounds` probes one after another, as a kubelet keeps probing during an attack."""
    out = []
    for _ in range(rounds):
        out.append(probe(port, tls=tls))
        time.sleep(pause_seconds)
    return out


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory (VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def client_tls(ca_file: Path | None = None) -> ssl.SSLContext:
    """What a kubelet HTTPS probe does: TLS without verifying the server (or against `ca_file`)."""
    if ca_file is not None:
        return ssl.create_default_context(cafile=str(ca_file))
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
