"""Mutating admission webhook: GPU pods in namespaces labelled `kgwe.nvidia.io/scheduling: enabled` get
`schedulerName: kgwe-scheduler` (unless they name another scheduler). Serves HTTPS only:

    kgwe webhook --tls-cert-file /etc/kgwe/webhook-tls/tls.crt --tls-key-file /etc/kgwe/webhook-tls/tls.key

POST /mutate-pods (AdmissionReview v1, JSON Patch), GET /healthz, GET /metrics. Registered by the
MutatingWebhookConfiguration `kgwe-scheduling` (failurePolicy Ignore: pods never wait on KGWE).

Until the certificate files exist (the controller issues them into the mounted Secret) it waits instead of
failing; `--probe-listen` serves plain GET /healthz (alive) and /readyz (200 once the certificate is loaded,
503 saying what it waits for), so a waiting pod is not Ready and is not restarted.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from kgwe.cluster.names import SCHEDULER_NAME
from kgwe.errors import KgweError
from kgwe.tlsfiles import ServingTLS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default="0.0.0.0:8443", help="HOST:PORT (port 0: any free port)")
    parser.add_argument("--tls-cert-file", required=True, help="PEM serving certificate (chain)")
    parser.add_argument("--tls-key-file", required=True, help="PEM private key of the certificate")
    parser.add_argument("--scheduler-name", default=SCHEDULER_NAME, help="schedulerName set on GPU pods")
    parser.add_argument(
        "--probe-listen",
        metavar="HOST:PORT",
        help="also serve GET /healthz and /readyz in plain HTTP here (kubelet probes; ready once the "
        "certificate is loaded)",
    )
    parser.add_argument("--log-level", default="INFO")


def _address(text: str, flag: str) -> tuple[str, int]:
    host, _, port_text = text.rpartition(":")
    try:
        return host or "0.0.0.0", int(port_text)
    except ValueError:
        raise KgweError(f"{flag} {text!r} is not HOST:PORT") from None


def _probe_handler(tls: ServingTLS):
    from kgwe.httpd import JSON, error_body

    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        if path not in ("/healthz", "/readyz"):
            return 404, error_body(f"no route {path}; use /healthz, /readyz"), JSON
        if method != "GET":
            return 405, error_body(f"{path} accepts GET"), JSON
        if path == "/healthz" or tls.loaded:
            return 200, b'{"status":"ok"}', JSON
        missing = ", ".join(str(p) for p in tls.missing())
        why = f"missing {missing}" if missing else (tls.last_error or "not loaded yet")
        return 503, error_body(f"waiting for the serving certificate: {why}"), JSON

    return handle


def _serve_probes(tls: ServingTLS, address: tuple[str, int]) -> None:
    """The plain probe port in a thread of its own (its own event loop)."""
    import asyncio

    from kgwe.httpd import serve

    def run() -> None:
        label = "kgwe webhook probes (GET /healthz /readyz) on"
        asyncio.run(serve(_probe_handler(tls), *address, label=label))

    threading.Thread(target=run, daemon=True, name="kgwe-webhook-probes").start()


def run(args: argparse.Namespace) -> int:
    import ssl

    from kgwe.admission.server import make_server

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    host, port = _address(args.listen, "--listen")
    tls = ServingTLS(args.tls_cert_file, args.tls_key_file)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.probe_listen:
        _serve_probes(tls, _address(args.probe_listen, "--probe-listen"))
    if not tls.wait(stop, what="the Secret mounted there is written by the KGWE controller or cert-manager"):
        return 0
    try:
        server = make_server(host, port, tls, scheduler_name=args.scheduler_name)
    except (OSError, ssl.SSLError) as exc:
        raise KgweError(f"cannot serve on {args.listen} with {args.tls_cert_file}: {exc}") from None
    bound_host, bound_port = str(server.server_address[0]), server.server_address[1]
    print(f"kgwe webhook listening on {bound_host}:{bound_port}", file=sys.stderr, flush=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="kgwe-webhook")
    thread.start()
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0
