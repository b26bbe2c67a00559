"""The HTTP/1.1 server every KGWE port runs on (the extender's API and probe ports, the controller's
webhook/health/metrics port, the admission webhook), on asyncio's Protocol layer.

Why this and not a framework: kube-scheduler keeps a few keep-alive connections and sends POSTs with a
Content-Length; each answer is ~0.2-0.5 ms of CPU at 1,000 nodes, so the server must add little and, above
all, stay in control of bad input. Measured on the same engine at 1,000 nodes (32 closed-loop clients, this
2-core shared machine): this server 0.28-0.39 ms CPU per request, aiohttp 0.38-0.43 ms. The deciding points
are (1) no new dependency (the stdlib's http.server is thread-per-connection: every slow client holds a
thread and its buffers), (2) exact fault control. The handler runs inline on the event loop (no thread
hop) and never blocks on I/O.

Nobody who reaches the port can starve it or grow it (bounds in kgwe.httpd.limits.Limits):
- Deadlines per request, not per read: the request line and headers must all arrive within
  `header_timeout_seconds` of the request's first byte (for a new connection, of its accept, so a TLS
  handshake and a silent client count too), the whole request within `request_timeout_seconds`; a client
  dribbling a byte a second gets a 408 at the deadline. Idle keep-alive connections close after
  `idle_timeout_seconds`.
- A full connection table never refuses a newcomer: it evicts (kgwe.httpd.table) a lingering connection,
  else one of the address holding the most connections (its longest idle, else its oldest unfinished). A
  kubelet probing from the node's address therefore always gets in and is answered.
- Memory: headers over `max_header_bytes` get a 431 at once, bodies over `max_body_bytes` a 413 answered
  from the headers (the body is never kept), and all unfinished requests together hold at most
  `max_buffered_bytes` (over it the oldest unfinished ones are evicted). A client that stops reading
  answers stops its reading too (write flow control), so pipelined requests cannot pile up answers.
- TLS runs over memory BIOs inside the connection (kgwe.httpd.tls): the handshake is inside the table and
  under the header deadline, and what arrives is decrypted at once into the request buffer, so a TLS
  connection costs the SSL object and at most one partial record (asyncio's own SSL transport keeps a
  256 KiB read buffer per connection: 300 unfinished handshakes grew the webhook to ~190 MiB).
- Guarded paths (`/metrics`) need a bearer token the API server accepts (kgwe.httpd.access); reviews run
  off the event loop.

Fault rules: every error is a 4xx/5xx with a JSON body {"error": "..."}: malformed request line or headers
400 (methods, header names and Content-Length read as HTTP defines them, kgwe.httpd.headers; whatever else
fails to parse is a 400 too), chunked bodies 411, bodies over the limit 413, headers over the limit 431,
deadline 408, evicted or no room 503, no or bad token 401, not allowed 403. An unexpected exception in a
handler is logged and answered 422, never 500, and never kills the server. After an error answer the
connection lingers: the server half-closes, reads and drops what the client still sends (at most
LINGER_SECONDS), then closes — closing a socket with unread input makes the kernel send a reset that can
destroy the answer before the client reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TypedDict, Unpack, cast

import orjson

from kgwe.httpd.access import AccessGuard, Verdict
from kgwe.httpd.headers import content_length, is_token
from kgwe.httpd.limits import Limits
from kgwe.httpd.table import ConnectionTable
from kgwe.httpd.tls import TlsSession

log = logging.getLogger("kgwe.httpd")

LINGER_SECONDS = 2.0
READ_BYTES = 64 * 1024  # one socket read; the buffer is the server's, shared by its connections
JSON = b"application/json"

Handler = Callable[[str, str, bytes], tuple[int, bytes, bytes]]  # (method, path, body) -> status, body, ctype
# the same with the request headers (lower-case names; the last of repeated ones)
HeaderHandler = Callable[[str, str, bytes, dict[str, str]], tuple[int, bytes, bytes]]


class ServeOptions(TypedDict, total=False):
    """serve()'s options a ServerThread passes on (mypy checks the two agree)."""

    limits: Limits | None
    tls: TlsSource | None
    guard: AccessGuard | None
    label: str


@dataclass(frozen=True)
class WithHeaders:
    """A handler that is also given the request headers: `serve(WithHeaders(handler), ...)`."""

    handler: HeaderHandler


# a fixed serving context, or a callable asked once per connection (certificates renewed in place)
TlsSource = ssl.SSLContext | Callable[[], ssl.SSLContext]
_Request = tuple[str, str, bytes, dict[str, str], bool]  # method, path, body, headers, keep-alive


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})


_STATUS_LINES = {s.value: b"HTTP/1.1 %d %s" % (s.value, s.phrase.encode()) for s in HTTPStatus}


def _response(status: int, body: bytes, ctype: bytes, keep_alive: bool) -> bytes:
    conn = b"keep-alive" if keep_alive else b"close"
    return b"".join(
        (
            _STATUS_LINES[status],
            b"\r\nContent-Type: ",
            ctype,
            b"\r\nContent-Length: %d\r\nConnection: " % len(body),
            conn,
            b"\r\n\r\n",
            body,
        )
    )


class _Server:
    """What every connection of one listening socket shares."""

    def __init__(
        self,
        handler: Handler | WithHeaders,
        limits: Limits,
        tls: TlsSource | None,
        guard: AccessGuard | None,
    ) -> None:
        self.handler = handler
        self.limits = limits
        self.tls = tls
        self.guard = guard
        self.table = ConnectionTable(limits.max_connections, limits.max_buffered_bytes)
        self.loop = asyncio.get_running_loop()
        # Every read lands here and is consumed before the next one (one event loop), so one buffer serves
        # every connection: no per-read allocation (the plain transport would allocate 256 KiB per recv).
        self.read_view = memoryview(bytearray(READ_BYTES))

    def context(self) -> ssl.SSLContext:
        assert self.tls is not None
        return self.tls if isinstance(self.tls, ssl.SSLContext) else self.tls()


class _Conn(asyncio.BufferedProtocol):
    def __init__(self, server: _Server) -> None:
        self.srv = server
        self.limits = server.limits
        self.transport: asyncio.Transport | None = None
        self.tls: TlsSession | None = None
        self.peer = "?"
        now = time.monotonic()
        self.started = now
        self.idle_since = now
        self.buffered = 0
        self.served = 0
        self.buf = bytearray()
        self.scan = 0  # where to resume looking for the end of the headers
        self.pending: tuple[int, int, str, str, bool, dict[str, str]] | None = None
        self.draining = False
        self.waiting = False  # a token review is under way for the request taken from buf
        self.write_paused = False
        self.closed = False
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None

    # -- table entry -------------------------------------------------------------------------------------
    def lingering(self) -> bool:
        return self.draining

    def idle(self) -> bool:
        return self.served > 0 and not (self.buf or self.pending or self.waiting or self.draining)

    def evict(self, reason: str) -> None:
        """Made room for another connection: answered 503 if it was mid-request, then closed."""
        log.debug("evicting a connection from %s: %s", self.peer, reason)
        if self.transport is not None:
            if (self.buf or self.pending or self.waiting) and not (self.draining or self.handshaking):
                with contextlib.suppress(OSError, RuntimeError, ssl.SSLError):
                    self._write(_response(503, error_body(f"{reason}; retry"), JSON, False))
            self.transport.abort()
        self._gone()

    @property
    def handshaking(self) -> bool:
        return self.tls is not None and not self.tls.established

    # -- connection life ----------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream server's connections are Transports
        self.transport = transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        self.started = time.monotonic()
        self.srv.table.admit(self)
        self._arm(self.limits.header_timeout_seconds)  # TLS handshake and headers alike
        if self.srv.tls is not None:
            try:
                self.tls = TlsSession(self.srv.context())
            except (OSError, ssl.SSLError) as exc:
                log.warning("no TLS context for a new connection: %s", exc)
                transport.abort()
                self._gone()

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone()

    def _gone(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.srv.table.remove(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.transport = None
        self.tls = None
        self.buf = bytearray()
        self.pending = None

    def eof_received(self) -> bool:
        if self.draining and self.transport is not None:
            self.transport.close()  # the client read the answer and closed: nothing unread is left
        return False

    def pause_writing(self) -> None:
        """The client does not read its answers: stop reading its requests until it does."""
        self.write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.transport is not None and not self.closed and not self.waiting:
            self.transport.resume_reading()
            self._process()

    def _write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(self.tls.wrap(data) if self.tls is not None else data)

    def _close_notify(self) -> None:
        """Under TLS, say that nothing more comes before the socket closes or half-closes."""
        if self.tls is not None and self.transport is not None:
            self.transport.write(self.tls.close_notify())

    # -- deadlines ---------------------------------------------------------------------------------------
    def _arm(self, seconds: float, since: float | None = None) -> None:
        """Move the connection's one deadline to `since` (monotonic; default now) + seconds. The timer is
        rescheduled only when the deadline moves earlier; a later deadline is checked when the timer fires
        (a keep-alive connection answering thousands of requests a second would otherwise schedule and
        cancel two timers per request)."""
        loop = self.srv.loop  # its clock is time.monotonic
        self.deadline = (loop.time() if since is None else since) + seconds
        if self.timer is None or self.deadline < self.timer.when():
            if self.timer is not None:
                self.timer.cancel()
            self.timer = loop.call_at(self.deadline, self._timeout)

    def _timeout(self) -> None:
        self.timer = None
        if self.closed or self.transport is None:
            return
        loop = self.srv.loop
        if loop.time() + 0.001 < self.deadline:  # the deadline moved later since the timer was set
            self.timer = loop.call_at(self.deadline, self._timeout)
            return
        if self.handshaking:
            self.evict("TLS handshake not finished in time")
        elif self.draining or self.write_paused:
            self.transport.abort()
            self._gone()
        elif self.waiting:
            self._fail(503, "the token review did not finish in time; retry")
        elif self.pending is not None:
            self._fail(
                408, f"request not received completely within {self.limits.request_timeout_seconds:g} s"
            )
        elif self.buf:
            self._fail(408, f"request headers not received within {self.limits.header_timeout_seconds:g} s")
        elif self.served == 0:  # connected and said nothing
            self.transport.abort()
            self._gone()
        else:  # idle keep-alive connection
            self.transport.close()

    def _fail(self, status: int, message: str) -> None:
        """Answer an error, then linger: half-close and drop further input until the client closes or
        LINGER_SECONDS pass, so the kernel does not reset the connection under the unread answer."""
        self.buf = bytearray()
        self.pending = None
        self.srv.table.grow(self, 0)
        if self.transport is None or self.draining:
            return
        self.draining = True
        try:
            self._write(_response(status, error_body(message), JSON, False))
            self._close_notify()
            if self.transport.can_write_eof():
                self.transport.write_eof()
        except (OSError, ssl.SSLError):  # the client is already gone
            self.transport.abort()
            self._gone()
            return
        self._arm(LINGER_SECONDS)

    # -- requests ----------------------------------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        return self.srv.read_view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.srv.read_view[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        if self.closed or self.draining:
            return  # after an error answer: read and drop
        if self.tls is not None:
            data = self._decrypt(data)
            if not data:
                return
        if not self.buf and self.pending is None and self.served and not self.waiting:
            self.started = time.monotonic()  # the first byte of a new request on a kept-alive connection
            self._arm(self.limits.header_timeout_seconds)
        self.buf += data
        if not self.srv.table.grow(self, len(self.buf)):
            self._fail(503, "the server is holding too much unfinished request data; retry")
            return
        if self.waiting or self.write_paused:
            if self.transport is not None:
                self.transport.pause_reading()
            return
        self._process()

    def _decrypt(self, data: bytes | memoryview) -> bytes:
        """The plaintext in `data`; sends what TLS has to say (handshake, tickets, alerts)."""
        assert self.tls is not None and self.transport is not None
        try:
            plain, out = self.tls.feed(data)
        except ssl.SSLError as exc:  # not TLS, no or a wrong client certificate: the alert, then close
            log.debug("TLS with %s failed: %s", self.peer, exc)
            with contextlib.suppress(OSError):
                self.transport.write(self.tls.pending())
            self.transport.close()
            self.draining = True
            self._arm(LINGER_SECONDS)
            return b""
        if out:
            self.transport.write(out)
        return plain

    def _process(self) -> None:
        while self.buf and not (self.closed or self.draining or self.waiting or self.write_paused):
            if self.pending is None:
                try:
                    self.pending = self._head()
                except Exception as exc:  # a parser bug: still an answer, never a dropped connection
                    log.warning("cannot parse a request from %s: %s", self.peer, type(exc).__name__)
                    self._fail(400, "malformed request")
                    return
                if self.pending is None:
                    return  # incomplete headers, or answered with an error
                self._arm(self.limits.request_timeout_seconds, since=self.started)
            end, total, method, path, keep_alive, headers = self.pending
            if len(self.buf) < total:
                return  # wait for the rest of the body; the request deadline is running
            self.pending = None
            body = bytes(memoryview(self.buf)[end + 4 : total])  # one copy (a bytearray slice is a second)
            del self.buf[:total]
            self.scan = 0
            self.srv.table.grow(self, len(self.buf))
            request = (method, path, body, headers, keep_alive)
            guard = self.srv.guard
            if guard is not None and path in guard.paths:
                verdict = guard.check(path, headers.get("authorization"))
                if verdict is None:
                    if self._ask(guard, request):
                        return
                    verdict = Verdict(503, "too many token reviews under way; retry")
                if not verdict.allowed:
                    self._answer(verdict.status, error_body(verdict.message), JSON, keep_alive)
                    continue
            self._call(request)

    def _ask(self, guard: AccessGuard, request: _Request) -> bool:
        loop = self.srv.loop

        def done(verdict: Verdict) -> None:
            with contextlib.suppress(RuntimeError):  # the server stopped meanwhile
                loop.call_soon_threadsafe(self._reviewed, verdict, request)

        if not guard.submit(request[1], request[3].get("authorization"), done):
            return False
        self.waiting = True
        if self.transport is not None:
            self.transport.pause_reading()
        return True

    def _reviewed(self, verdict: Verdict, request: _Request) -> None:
        self.waiting = False
        if self.closed or self.draining or self.transport is None:
            return
        if verdict.allowed:
            self._call(request)
        else:
            self._answer(verdict.status, error_body(verdict.message), JSON, request[4])
        if self.transport is not None and not self.closed and not self.write_paused:
            self.transport.resume_reading()
            self._process()

    def _call(self, request: _Request) -> None:
        method, path, body, headers, keep_alive = request
        try:
            handler = self.srv.handler
            if isinstance(handler, WithHeaders):
                status, payload, ctype = handler.handler(method, path, body, headers)
            else:
                status, payload, ctype = handler(method, path, body)
        except Exception as exc:  # a bug must not become a 500 or a dead server
            log.exception("handler failed for %s %s", method, path)
            status, payload, ctype = 422, error_body(f"cannot process: {type(exc).__name__}"), JSON
        self._answer(status, payload, ctype, keep_alive)

    def _answer(self, status: int, payload: bytes, ctype: bytes, keep_alive: bool) -> None:
        if self.transport is None or self.closed:
            return
        self._write(_response(status, payload, ctype, keep_alive))
        self.served += 1
        if not keep_alive:
            self.draining = True  # flushed and closed; evictable first if the client never reads it
            self._arm(LINGER_SECONDS)
            self._close_notify()
            self.transport.close()
            return
        now = time.monotonic()
        self.idle_since = now
        if self.buf:  # a pipelined request has begun
            self.started = now
            self._arm(self.limits.header_timeout_seconds)
        else:
            self._arm(self.limits.idle_timeout_seconds)

    def _head(self) -> tuple[int, int, str, str, bool, dict[str, str]] | None:
        """(header end, request end, method, path, keep-alive, headers) once the headers are complete."""
        cap = self.limits.max_header_bytes
        end = self.buf.find(b"\r\n\r\n", self.scan, cap + 4)
        if end < 0:
            if len(self.buf) > cap:
                self._fail(431, f"request headers larger than {cap} bytes")
            else:
                self.scan = max(0, len(self.buf) - 3)  # a dribbled request is scanned once, not per byte
            return None
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not is_token(parts[0]):
            self._fail(400, "malformed request line")
            return None
        method, target, version = parts
        length = 0
        keep_alive = version == "HTTP/1.1"
        seen: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not is_token(name):
                self._fail(400, "malformed header line")
                return None
            name, value = name.lower(), value.strip()
            if name == "content-length":
                said = content_length(value)
                if said is None or (name in seen and seen[name] != value):
                    self._fail(400, "Content-Length is not one non-negative number of ASCII digits")
                    return None
                length = said
            elif name == "transfer-encoding" and value.lower() != "identity":
                self._fail(411, "send the body with a Content-Length (chunked bodies are not accepted)")
                return None
            elif name == "connection":
                v = value.lower()
                keep_alive = v != "close" and (keep_alive or v == "keep-alive")
            seen[name] = value
        if length > self.limits.max_body_bytes:
            self._fail(413, f"body of {length} bytes exceeds the {self.limits.max_body_bytes} byte limit")
            return None
        return end, end + 4 + length, method, target.split("?", 1)[0], keep_alive, seen


async def serve(
    handler: Handler | WithHeaders,
    host: str,
    port: int,
    *,
    limits: Limits | None = None,
    tls: TlsSource | None = None,
    guard: AccessGuard | None = None,
    started: Callable[[int], None] | None = None,
    stop: asyncio.Event | None = None,
    label: str = "kgwe extender listening on",
    sock: socket.socket | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (or `stop` is set). `started(port)` is called once listening. A handler
    wrapped in WithHeaders also gets the request headers; with `sock`, serve that listening socket; with
    `guard`, its paths need a token the API server accepts."""
    loop = asyncio.get_running_loop()
    shared = _Server(handler, limits or Limits(), tls, guard)

    def factory() -> _Conn:
        return _Conn(shared)

    if sock is not None:
        server = await loop.create_server(factory, sock=sock, backlog=2048)
    else:
        server = await loop.create_server(factory, host, port, reuse_address=True, backlog=2048)
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
    for conn in list(shared.table.entries):
        conn.evict("the server is stopping")


class ServerThread:
    """`serve` on a bound socket in a thread of its own (for processes whose main thread does other work,
    and for tests): `start()` returns once listening, `stop()` ends it."""

    def __init__(
        self, handler: Handler | WithHeaders, address: tuple[str, int], **options: Unpack[ServeOptions]
    ) -> None:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(address)
        self.sock.listen(2048)
        self.handler = handler
        self.options = options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def start(self, name: str = "kgwe-http") -> ServerThread:
        ready = threading.Event()

        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            await serve(
                self.handler,
                "",
                0,
                sock=self.sock,
                stop=self._stop,
                started=lambda _: ready.set(),
                **self.options,
            )

        self._thread = threading.Thread(target=asyncio.run, args=(main(),), name=name, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the HTTP server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # already stopped
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sock.close()
