"""The webhook's routes on KGWE's one server (kgwe.httpd): POST /mutate-pods (AdmissionReview v1), GET
/healthz, GET /metrics, over HTTPS.

Bad input never reaches a traceback: bodies over MAX_BODY_BYTES get a 413 answered from the headers, a
malformed review a 400 with a JSON message; slow clients, unfinished handshakes and piled headers are the
server's to bound (deadlines per request, an evicting connection table, a byte budget), so the pod stays far
below its 256 MiB limit. The serving certificate is reread when its file changes (cert-manager renews it
in place in the mounted Secret); with a client CA, the API server must present a certificate from it.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections import Counter
from pathlib import Path

from kgwe.admission.decision import ReviewError, review
from kgwe.cluster.names import SCHEDULER_NAME
from kgwe.httpd import JSON, Handler, Limits, error_body

log = logging.getLogger("kgwe.admission")

MUTATE_PATH = "/mutate-pods"
MAX_BODY_BYTES = 4 * 1024 * 1024  # a pod object is at most ~1.5 MiB in etcd; a review holds one
CERT_CHECK_SECONDS = 30.0
# Worst case: 32 MiB of unfinished reviews (eight of the largest at once) plus 256 TLS connections, well
# inside the pod's 256 MiB limit.
LIMITS = Limits(max_connections=256, max_body_bytes=MAX_BODY_BYTES, max_buffered_bytes=32 * 1024 * 1024)


class CertificateReloader:
    """An SSLContext whose certificate follows the files (checked at most every CERT_CHECK_SECONDS)."""

    def __init__(self, cert_file: Path, key_file: Path, client_ca_file: Path | None = None) -> None:
        self.cert_file, self.key_file = Path(cert_file), Path(key_file)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        if client_ca_file is not None:
            self.context.load_verify_locations(cafile=str(client_ca_file))
            self.context.verify_mode = ssl.CERT_REQUIRED
        self._stamp: tuple[float, float] | None = None
        self._checked = 0.0
        self._mu = threading.Lock()
        self.reload(force=True)

    def reload(self, force: bool = False, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._mu:
            if not force and now - self._checked < CERT_CHECK_SECONDS:
                return
            self._checked = now
            stamp = (os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime)
            if stamp != self._stamp:
                self.context.load_cert_chain(self.cert_file, self.key_file)
                self._stamp = stamp

    def current(self) -> ssl.SSLContext:
        """The context for a new connection, after a (rate-limited) look at the files."""
        try:
            self.reload()
        except (OSError, ssl.SSLError) as exc:  # keep serving with the certificate already loaded
            log.warning("serving certificate not reloaded: %s", exc)
        return self.context


def make_handler(scheduler_name: str = SCHEDULER_NAME, counts: Counter[str] | None = None) -> Handler:
    """The routes; `counts` (review outcomes) is what /metrics shows."""
    counts = Counter() if counts is None else counts

    def error(status: int, message: str) -> tuple[int, bytes, bytes]:
        counts[f"error_{status}"] += 1
        return status, error_body(message), JSON

    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        if method == "GET":
            if path == "/healthz":
                return 200, b"ok", b"text/plain"
            if path == "/metrics":
                lines = ["# TYPE kgwe_webhook_reviews_total counter"]
                lines += [
                    f'kgwe_webhook_reviews_total{{outcome="{k}"}} {v}' for k, v in sorted(counts.items())
                ]
                return 200, ("\n".join(lines) + "\n").encode(), b"text/plain; version=0.0.4"
            return error(404, f"no such path {path[:100]!r}")
        if method != "POST" or path != MUTATE_PATH:
            return error(404, f"POST {MUTATE_PATH} only")
        try:
            answer, decision = review(body, scheduler_name)
        except ReviewError as exc:
            return error(400, str(exc))
        except RecursionError:  # deeply nested JSON
            return error(400, "body nests too deeply")
        counts["routed" if decision.patch else "unchanged"] += 1
        log.debug("review: %s", decision.reason)
        return 200, answer, JSON

    return handle
