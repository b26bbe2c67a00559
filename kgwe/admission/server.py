"""The webhook's HTTPS server: POST /mutate-pods (AdmissionReview v1), GET /healthz, GET /metrics.

stdlib `http.server`, one thread per connection: admission traffic is one request per pod creation, far
below what needs more. Bad input never reaches a traceback: bodies must carry a Content-Length no larger
than MAX_BODY_BYTES (413 otherwise, answered without reading the body), a malformed review is a 400 with
a JSON message, a slow client is cut off after `timeout_seconds`. The serving certificate is reread when
its files change (the controller or cert-manager renews it in the mounted Secret; kgwe.tlsfiles).
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson

from kgwe.admission.decision import ReviewError, review
from kgwe.cluster.names import SCHEDULER_NAME
from kgwe.tlsfiles import ServingTLS

log = logging.getLogger("kgwe.admission")

MUTATE_PATH = "/mutate-pods"
MAX_BODY_BYTES = 4 * 1024 * 1024  # a pod object is at most ~1.5 MiB in etcd; a review holds one
CERT_CHECK_SECONDS = 30.0


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        tls: ServingTLS,
        scheduler_name: str = SCHEDULER_NAME,
        timeout_seconds: float = 10.0,
    ) -> None:
        super().__init__(address, _Handler)
        self.tls = tls
        self.scheduler_name = scheduler_name
        self.timeout_seconds = timeout_seconds
        self.counts: Counter[str] = Counter()
        self._mu = threading.Lock()

    def get_request(self):
        sock, addr = self.socket.accept()
        sock.settimeout(self.timeout_seconds)
        return self.tls.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address) -> None:
        """A failed handshake or a dropped client: one log line, never a traceback."""
        import sys

        log.info("connection from %s ended: %s", client_address[0], sys.exc_info()[1])

    def count(self, outcome: str) -> None:
        with self._mu:
            self.counts[outcome] += 1


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer
    protocol_version = "HTTP/1.1"
    server_version = "kgwe-webhook"
    sys_version = ""

    def log_message(self, fmt: str, *args: object) -> None:  # access log at debug level only
        log.debug("%s " + fmt, self.client_address[0], *args)

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self.server.count(f"error_{status}")
        self.close_connection = True
        self._send(status, orjson.dumps({"error": message}))

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, b"ok", "text/plain")
        elif self.path == "/metrics":
            with self.server._mu:
                counts = dict(self.server.counts)
            lines = ["# TYPE kgwe_webhook_reviews_total counter"]
            lines += [f'kgwe_webhook_reviews_total{{outcome="{k}"}} {v}' for k, v in sorted(counts.items())]
            self._send(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4")
        else:
            self._error(404, f"no such path {self.path[:100]!r}")

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != MUTATE_PATH:
            self._error(404, f"POST {MUTATE_PATH} only")
            return
        if self.headers.get("Transfer-Encoding", "identity").lower() != "identity":
            self._error(411, "send the body with a Content-Length (chunked bodies are not accepted)")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(411, "Content-Length missing or not a number")
            return
        if length < 0 or length > MAX_BODY_BYTES:
            self._error(413, f"body of {length} bytes exceeds the {MAX_BODY_BYTES} byte limit")
            return
        try:
            body = self.rfile.read(length)
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        try:
            answer, decision = review(body, self.server.scheduler_name)
        except ReviewError as exc:
            self._error(400, str(exc))
            return
        except RecursionError:  # deeply nested JSON
            self._error(400, "body nests too deeply")
            return
        self.server.count("routed" if decision.patch else "unchanged")
        log.debug("review: %s", decision.reason)
        self._send(200, answer)


def make_server(
    host: str,
    port: int,
    cert_file: Path | ServingTLS,
    key_file: Path | None = None,
    scheduler_name: str = SCHEDULER_NAME,
) -> WebhookServer:
    """The server on loaded TLS files (a ServingTLS, or a certificate and key that must load now)."""
    if isinstance(cert_file, ServingTLS):
        tls = cert_file
    else:
        assert key_file is not None
        tls = ServingTLS(cert_file, key_file)
        if not tls.reload(force=True):
            raise ssl.SSLError(tls.last_error or f"cannot load {cert_file}")
    return WebhookServer((host, port), tls, scheduler_name)
