"""Mutating admission webhook: GPU pods in namespaces labelled `kgwe.nvidia.io/scheduling: enabled` get
`schedulerName: kgwe-scheduler` (unless they name another scheduler). Serves HTTPS only:

    kgwe webhook --tls-cert-file /etc/kgwe/webhook-tls/tls.crt --tls-key-file /etc/kgwe/webhook-tls/tls.key \
                 --client-ca-file /etc/kgwe/webhook-tls/client-ca.crt

POST /mutate-pods (AdmissionReview v1, JSON Patch), GET /healthz, GET /metrics. Registered by the
MutatingWebhookConfiguration `kgwe-scheduling` (failurePolicy Ignore: pods never wait on KGWE).

The API server presents a client certificate to webhooks only when its admission configuration says so;
without --client-ca-file the webhook refuses to start unless --insecure-any-client says that is intended.
It is a fair choice for this webhook: it reads nothing, writes nothing, and answers any caller only the
patch the caller's own review asks for.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
from pathlib import Path

from kgwe.cluster.names import SCHEDULER_NAME
from kgwe.errors import KgweError
from kgwe.httpd.exposure import INSECURE_ANY_CLIENT, check_client_auth


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default="0.0.0.0:8443", help="HOST:PORT (port 0: any free port)")
    parser.add_argument("--tls-cert-file", required=True, help="PEM serving certificate (chain)")
    parser.add_argument("--tls-key-file", required=True, help="PEM private key of the certificate")
    parser.add_argument(
        "--client-ca-file", help="require the API server's client certificate, signed by this CA (PEM)"
    )
    parser.add_argument(
        INSECURE_ANY_CLIENT,
        action="store_true",
        help="serve without verifying clients (the API server presents no client certificate by default)",
    )
    parser.add_argument("--scheduler-name", default=SCHEDULER_NAME, help="schedulerName set on GPU pods")
    parser.add_argument("--log-level", default="INFO")


def run(args: argparse.Namespace) -> int:
    from kgwe.admission.server import LIMITS, CertificateReloader, make_handler
    from kgwe.httpd import serve

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    host, _, port_text = args.listen.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        raise KgweError(f"--listen {args.listen!r} is not HOST:PORT") from None
    host = host.strip("[]") or "0.0.0.0"
    check_client_auth(
        "kgwe webhook",
        host,
        tls=True,
        client_ca=bool(args.client_ca_file),
        insecure_any_client=args.insecure_any_client,
    )
    try:
        ca = Path(args.client_ca_file) if args.client_ca_file else None
        tls = CertificateReloader(Path(args.tls_cert_file), Path(args.tls_key_file), ca)
    except (OSError, ssl.SSLError) as exc:
        raise KgweError(f"cannot serve with {args.tls_cert_file}: {exc}") from None
    try:
        asyncio.run(
            serve(
                make_handler(args.scheduler_name),
                host,
                port,
                limits=LIMITS,
                tls=tls.current,
                label="kgwe webhook listening on",
            )
        )
    except OSError as exc:
        raise KgweError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None
    return 0
