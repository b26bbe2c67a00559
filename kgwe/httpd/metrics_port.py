"""The guarded GET /metrics over TLS: the controller's and the extender's port for Prometheus.

/metrics off loopback answers only a bearer token the API server accepts (kgwe.httpd.access); sent over plain
HTTP that token would cross the network in clear, for anyone on the path to replay. So off loopback /metrics
is served on a port of its own with TLS (`--metrics-listen`, the certificate KGWE's controller issues in
Secret kgwe-metrics-tls, reread when the kubelet refreshes it), and a plain-HTTP port answers it only on
loopback or when the operator opened /metrics to anyone (`--insecure-public-metrics`: then no token is asked,
so none can leak). Until its certificate files exist the port refuses handshakes; nothing else waits on it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from kgwe.errors import KgweError
from kgwe.httpd.exposure import INSECURE_PUBLIC_METRICS, is_loopback
from kgwe.httpd.limits import Limits
from kgwe.httpd.server import JSON, Handler, error_body

METRICS_LISTEN = "--metrics-listen"
CONTENT_TYPE = b"text/plain; version=0.0.4"  # Prometheus' text exposition format
# Prometheus scrapes: a few connections, GETs only
LIMITS = Limits(max_connections=64, max_body_bytes=4096, max_buffered_bytes=4 * 1024 * 1024)
OVER_TLS_ONLY = (
    f"GET /metrics is served over TLS only (its bearer token never crosses the network in clear): scrape the "
    f"{METRICS_LISTEN} port with https"
)
# (status, body, content type) of GET /metrics
Exposition = Callable[[], tuple[int, bytes, bytes]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        METRICS_LISTEN,
        metavar="HOST:PORT",
        help="serve GET /metrics here over TLS, for a token the API server lets get /metrics (Prometheus)",
    )
    parser.add_argument(
        "--metrics-tls-cert-file", help=f"{METRICS_LISTEN}'s certificate (PEM; reread on change)"
    )
    parser.add_argument("--metrics-tls-key-file", help="private key of --metrics-tls-cert-file (PEM)")


def plain_metrics(host: str, insecure_public_metrics: bool) -> bool:
    """May a plain-HTTP port on `host` answer GET /metrics? On loopback (only this pod or host reaches it),
    or when the operator opened /metrics to anyone; otherwise it says OVER_TLS_ONLY."""
    return is_loopback(host) or insecure_public_metrics


MetricsPort = tuple[tuple[str, int], tuple[str, str] | None]  # (host, port), (cert file, key file) or None


def metrics_port(args: argparse.Namespace) -> MetricsPort | None:
    """The TLS metrics port the flags ask for: its address and certificate files (None: plain HTTP, only on
    loopback or with --insecure-public-metrics); None when no port is asked for. The server serves the
    files with kgwe.tlsfiles.ServingTLS (absent files: it refuses handshakes until they are written)."""
    text = getattr(args, "metrics_listen", None)
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise KgweError(f"{METRICS_LISTEN}: expected HOST:PORT, got {text!r}")
    address = (host.strip("[]") or "0.0.0.0", int(port))
    cert, key = args.metrics_tls_cert_file, args.metrics_tls_key_file
    if bool(cert) != bool(key):
        raise KgweError("give both --metrics-tls-cert-file and --metrics-tls-key-file")
    if cert:
        return address, (cert, key)
    if not plain_metrics(address[0], args.insecure_public_metrics):
        raise KgweError(
            f"{METRICS_LISTEN} {text}: /metrics off loopback is served over TLS only; give "
            f"--metrics-tls-cert-file and --metrics-tls-key-file, or {INSECURE_PUBLIC_METRICS}"
        )
    return address, None


def handler(exposition: Exposition) -> Handler:
    """GET /metrics, nothing else."""

    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        if path != "/metrics":
            return 404, error_body(f"no route {path[:100]}; use /metrics"), JSON
        if method != "GET":
            return 405, error_body("/metrics accepts GET"), JSON
        return exposition()

    return handle


def refused(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
    """What a plain-HTTP port off loopback answers for /metrics."""
    return 404, error_body(OVER_TLS_ONLY), JSON
