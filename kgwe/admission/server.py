"""The webhook's routes on KGWE's one server (kgwe.httpd): POST /mutate-pods (AdmissionReview v1), GET
/healthz, GET /metrics, over HTTPS.

Bad input never reaches a traceback: bodies over MAX_BODY_BYTES get a 413 answered from the headers, a
malformed review a 400 with a JSON message; slow clients, unfinished handshakes and piled headers are the
server's to bound (deadlines per request, an evicting connection table, a byte budget), so the pod stays far
below its 256 MiB limit. The serving certificate is reread when its files change (the controller or
cert-manager renews it in the mounted Secret; kgwe.tlsfiles); with a client CA, the API server must present
a certificate from it.
"""

from __future__ import annotations

import logging
from collections import Counter

from kgwe.admission.decision import ReviewError, review
from kgwe.httpd import JSON, Handler, Limits, error_body
from kgwe.vocab import SCHEDULER_NAME

log = logging.getLogger("kgwe.admission")

MUTATE_PATH = "/mutate-pods"
MAX_BODY_BYTES = 4 * 1024 * 1024  # a pod object is at most ~1.5 MiB in etcd; a review holds one
# Worst case: 32 MiB of unfinished reviews (eight of the largest at once) plus 256 TLS connections, well
# inside the pod's 256 MiB limit.
LIMITS = Limits(max_connections=256, max_body_bytes=MAX_BODY_BYTES, max_buffered_bytes=32 * 1024 * 1024)


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
        counts["refused" if not decision.allowed else "routed" if decision.patch else "unchanged"] += 1
        log.debug("review: %s", decision.reason)
        return 200, answer, JSON

    return handle
