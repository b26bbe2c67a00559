"""A small HTTP/1.1 server on asyncio's Protocol layer, made for the extender's traffic pattern; the
controller's webhook/health/metrics port uses it too (no thread per connection, so slow clients cannot
starve /healthz).

Why this and not a framework: kube-scheduler keeps a few keep-alive connections and sends POSTs with a
Content-Length; each answer is ~0.2-0.5 ms of CPU at 1,000 nodes, so the server must add little and, above
all, stay in control of bad input. Measured on the same engine at 1,000 nodes (32 closed-loop clients, this
2-core shared machine): this server 0.28-0.39 ms CPU per request, aiohttp 0.38-0.43 ms. The gain is modest;
the deciding points are (1) no new dependency (aiohttp is not one of ours; the stdlib's http.server is
thread-per-request and far slower), (2) exact fault control: a 413 is answered from the headers without
reading the body, slow clients get a 408 from a per-request timer, and nothing can produce a 500. The
handler runs inline on the event loop (no thread hop) and never blocks on I/O.

Fault rules: every error is a 4xx with a JSON body {"error": "..."}: malformed request line or headers 400,
missing Content-Length / chunked bodies 411, bodies over the limit 413 (answered from the headers, the
body is never kept), headers over 64 KiB 431, requests not complete within `request_timeout` 408; idle
keep-alive connections close after `idle_timeout`. An unexpected exception in a handler is logged and
answered 422, never 500, and never kills the server. After an error answer the connection lingers: the
server half-closes, reads and drops what the client still sends (at most LINGER_SECONDS), then closes —
closing a socket with unread input makes the kernel send a reset that can destroy the answer before the
client reads it. At most `max_connections` are open at once: at the limit a new connection displaces an
idle keep-alive one, and only when all are mid-request (each bounded by `request_timeout`) is it answered
503 and closed; memory is bounded by max_connections x (max_body + MAX_HEADER).

TLS: with an `ssl.SSLContext` (see `server_tls_context`) the same server speaks HTTPS; with a client CA it
requires and verifies a client certificate in the handshake, so a client without one never reaches a route.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
import time
from collections.abc import Callable
from http import HTTPStatus

import orjson

log = logging.getLogger("kgwe.httpd")

MAX_BODY = 1024 * 1024  # default body cap; each server passes its own
MAX_HEADER = 64 * 1024
MAX_CONNECTIONS = 256  # kube-scheduler keeps a handful of keep-alive connections
LINGER_SECONDS = 2.0
JSON = b"application/json"

Handler = Callable[[str, str, bytes], tuple[int, bytes, bytes]]  # (method, path, body) -> status, body, ctype
# the same with the request headers (lower-case names; the last of repeated ones), for `serve(headers=True)`
HeaderHandler = Callable[[str, str, bytes, dict[str, str]], tuple[int, bytes, bytes]]


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})


def _response(status: int, body: bytes, ctype: bytes, keep_alive: bool) -> bytes:
    reason = HTTPStatus(status).phrase.encode()
    conn = b"keep-alive" if keep_alive else b"close"
    return b"".join(
        (
            b"HTTP/1.1 %d " % status,
            reason,
            b"\r\nContent-Type: ",
            ctype,
            b"\r\nContent-Length: %d\r\nConnection: " % len(body),
            conn,
            b"\r\n\r\n",
            body,
        )
    )


def server_tls_context(cert_file: str, key_file: str, client_ca_file: str | None = None) -> ssl.SSLContext:
    """HTTPS serving context (TLS >= 1.2); with a client CA, a verified client certificate is required."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.load_verify_locations(cafile=client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _Slots:
    """Open connections, shared by every connection of one server."""

    __slots__ = ("conns", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.conns: set[_Conn] = set()

    def admit(self, conn: _Conn) -> bool:
        """Room for `conn`: at the limit, an idle keep-alive connection (no request under way) makes room;
        only when every connection is mid-request is the newcomer refused."""
        self.conns.add(conn)
        if len(self.conns) <= self.limit:
            return True
        idle = [c for c in self.conns if c is not conn and c.idle()]
        if not idle:
            return False
        min(idle, key=lambda c: c.idle_since).close()  # the longest idle goes
        return True


class _Conn(asyncio.Protocol):
    __slots__ = (
        "buf",
        "deadline",
        "draining",
        "handler",
        "headers",
        "idle_since",
        "idle_timeout",
        "loop",
        "max_body",
        "pending",
        "request_timeout",
        "slots",
        "timer",
        "transport",
    )

    def __init__(
        self,
        handler: Handler | HeaderHandler,
        request_timeout: float,
        idle_timeout: float,
        slots: _Slots,
        max_body: int,
        headers: bool,
    ) -> None:
        self.handler = handler
        self.slots = slots
        self.max_body = max_body
        self.headers = headers
        self.draining = False
        self.idle_since = time.monotonic()
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.deadline = 0.0
        self.pending: tuple[int, int, str, str, bool, dict[str, str] | None] | None = None
        self.loop = asyncio.get_running_loop()

    # -- connection life ----------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        if not self.slots.admit(self):
            self._fail(503, f"too many connections (limit {self.slots.limit}); retry later")
            return
        self._arm(self.idle_timeout)

    def idle(self) -> bool:
        return self.transport is not None and not self.buf and not self.draining

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.slots.conns.discard(self)
        if self.timer:
            self.timer.cancel()
        self.transport = None

    def eof_received(self) -> bool:
        if self.draining and self.transport is not None:
            self.transport.close()  # the client read the answer and closed: nothing unread is left
        return False

    def _arm(self, seconds: float) -> None:
        """Move the connection's one deadline. The timer is rescheduled only when the deadline moves
        earlier; a later deadline is checked when the timer fires (a keep-alive connection answering
        thousands of requests a second would otherwise schedule and cancel two timers per request)."""
        self.deadline = self.loop.time() + seconds
        if self.timer is None or self.deadline < self.timer.when():
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(self.deadline, self._timeout)

    def _timeout(self) -> None:
        self.timer = None
        if self.transport is None:
            return
        if self.loop.time() + 0.001 < self.deadline:  # the deadline moved later since the timer was set
            self.timer = self.loop.call_at(self.deadline, self._timeout)
            return
        if self.draining:
            self.transport.close()
        elif self.buf:  # a request started but did not finish in time: slow or stuck client
            self._fail(408, f"request not received completely within {self.request_timeout:.0f} s")
        else:
            self.transport.close()

    def _fail(self, status: int, message: str) -> None:
        """Answer an error, then linger: half-close and drop further input until the client closes or
        LINGER_SECONDS pass, so the kernel does not reset the connection under the unread answer."""
        self.buf.clear()
        self.pending = None
        if self.transport is None or self.draining:
            return
        self.draining = True
        self.transport.write(_response(status, error_body(message), JSON, False))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._arm(LINGER_SECONDS)

    # -- parsing -----------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.draining:
            return  # after an error answer: read and drop
        if not self.buf:
            self._arm(self.request_timeout)
        self.buf += data
        while self.transport is not None and self.buf:
            if self.pending is None:
                self.pending = self._head()
                if self.pending is None:
                    return  # incomplete headers, or answered with an error
            end, total, method, path, keep_alive, headers = self.pending
            if len(self.buf) < total:
                return  # wait for the rest of the body; the request timer is running
            self.pending = None
            body = bytes(self.buf[end + 4 : total])
            del self.buf[:total]
            try:
                if headers is None:
                    status, payload, ctype = self.handler(method, path, body)  # type: ignore[call-arg]
                else:
                    status, payload, ctype = self.handler(method, path, body, headers)  # type: ignore[call-arg]
            except Exception as exc:  # a bug must not become a 500 or a dead server
                log.exception("handler failed for %s %s", method, path)
                status, payload, ctype = 422, error_body(f"cannot process: {type(exc).__name__}"), JSON
            self.transport.write(_response(status, payload, ctype, keep_alive))
            if not keep_alive:
                self.transport.close()
                return
            self.idle_since = time.monotonic()
            self._arm(self.request_timeout if self.buf else self.idle_timeout)

    def _head(self) -> tuple[int, int, str, str, bool, dict[str, str] | None] | None:
        """(header end, request end, method, path, keep-alive, headers) once the headers are complete."""
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 or end > MAX_HEADER:
            if end > MAX_HEADER or len(self.buf) > MAX_HEADER:
                self._fail(431, "request headers too large")
            return None
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._fail(400, "malformed request line")
            return None
        method, target, version = parts
        length = 0
        keep_alive = version == "HTTP/1.1"
        seen: dict[str, str] | None = {} if self.headers else None
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                self._fail(400, "malformed header line")
                return None
            name = name.strip().lower()
            if seen is not None:
                seen[name] = value.strip()
            if name == "content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    self._fail(400, "Content-Length is not a number")
                    return None
                if length < 0:
                    self._fail(400, "negative Content-Length")
                    return None
            elif name == "transfer-encoding" and value.strip().lower() != "identity":
                self._fail(411, "send the body with a Content-Length (chunked bodies are not accepted)")
                return None
            elif name == "connection":
                v = value.strip().lower()
                keep_alive = v != "close" and (keep_alive or v == "keep-alive")
        if length > self.max_body:
            self._fail(413, f"body of {length} bytes exceeds the {self.max_body} byte limit")
            return None
        return end, end + 4 + length, method, target.split("?", 1)[0], keep_alive, seen


async def serve(
    handler: Handler | HeaderHandler,
    host: str,
    port: int,
    *,
    max_body: int = MAX_BODY,
    headers: bool = False,
    request_timeout: float = 10.0,
    idle_timeout: float = 120.0,
    max_connections: int = MAX_CONNECTIONS,
    tls: ssl.SSLContext | None = None,
    started: Callable[[int], None] | None = None,
    stop: asyncio.Event | None = None,
    label: str = "kgwe extender listening on",
    sock: socket.socket | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (or `stop` is set). `started(port)` is called once listening. With
    `headers`, the handler also gets the request headers; with `sock`, serve that listening socket."""
    loop = asyncio.get_running_loop()
    slots = _Slots(max_connections)

    def factory() -> _Conn:
        return _Conn(handler, request_timeout, idle_timeout, slots, max_body, headers)

    handshake = request_timeout if tls is not None else None
    if sock is not None:
        server = await loop.create_server(
            factory, sock=sock, backlog=2048, ssl=tls, ssl_handshake_timeout=handshake
        )
    else:
        server = await loop.create_server(
            factory, host, port, reuse_address=True, backlog=2048, ssl=tls, ssl_handshake_timeout=handshake
        )
    stop = stop or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    bound = server.sockets[0].getsockname()[1]
    log.info("%s %s:%d (%s)", label, host, bound, "https" if tls is not None else "http")
    if started:
        started(bound)
    async with server:
        await stop.wait()
    server.close()
