"""Mutating admission webhook: GPU pods in namespaces labelled `kgwe.nvidia.io/scheduling: enabled` get
`schedulerName: kgwe-scheduler` (unless they name another scheduler). Serves HTTPS only:

    kgwe webhook --tls-cert-file /etc/kgwe/webhook-tls/tls.crt --tls-key-file /etc/kgwe/webhook-tls/tls.key

POST /mutate-pods (AdmissionReview v1, JSON Patch), GET /healthz, GET /metrics. Registered by the
MutatingWebhookConfiguration `kgwe-scheduling` (failurePolicy Ignore: pods never wait on KGWE).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from kgwe.cluster.names import SCHEDULER_NAME
from kgwe.errors import KgweError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default="0.0.0.0:8443", help="HOST:PORT (port 0: any free port)")
    parser.add_argument("--tls-cert-file", required=True, help="PEM serving certificate (chain)")
    parser.add_argument("--tls-key-file", required=True, help="PEM private key of the certificate")
    parser.add_argument("--scheduler-name", default=SCHEDULER_NAME, help="schedulerName set on GPU pods")
    parser.add_argument("--log-level", default="INFO")


def run(args: argparse.Namespace) -> int:
    import ssl

    from kgwe.admission.server import make_server

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    host, _, port_text = args.listen.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        raise KgweError(f"--listen {args.listen!r} is not HOST:PORT") from None
    try:
        server = make_server(
            host or "0.0.0.0", port, Path(args.tls_cert_file), Path(args.tls_key_file), args.scheduler_name
        )
    except (OSError, ssl.SSLError) as exc:
        raise KgweError(f"cannot serve on {args.listen} with {args.tls_cert_file}: {exc}") from None
    bound_host, bound_port = str(server.server_address[0]), server.server_address[1]
    print(f"kgwe webhook listening on {bound_host}:{bound_port}", file=sys.stderr, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="kgwe-webhook")
    thread.start()
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0
