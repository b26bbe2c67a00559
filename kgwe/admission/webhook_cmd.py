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

Until the certificate files exist (the controller issues them into the mounted Secret) it waits instead of
failing; `--probe-listen` serves plain GET /healthz (alive) and /readyz (200 once the certificate is loaded,
503 saying what it waits for), so a waiting pod is not Ready and is not restarted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.httpd import Handler
from kgwe.httpd.exposure import INSECURE_ANY_CLIENT, check_client_auth
from kgwe.tlsfiles import CHECK_SECONDS, ServingTLS
from kgwe.vocab import SCHEDULER_NAME


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
    parser.add_argument(
        "--tls-check-seconds",
        type=float,
        default=CHECK_SECONDS,
        help="look at the certificate files for a renewal at most this often, and this often (at most every "
        "second) while waiting for them",
    )
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
        return host.strip("[]") or "0.0.0.0", int(port_text)
    except ValueError:
        raise KgweError(f"{flag} {text!r} is not HOST:PORT") from None


def _probe_handler(tls: ServingTLS) -> Handler:
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


async def _serve(args: argparse.Namespace, tls: ServingTLS, address: tuple[str, int]) -> None:
    """The probe port at once (when asked), the webhook's port once the certificate is loaded."""
    from kgwe.admission.server import LIMITS, make_handler
    from kgwe.httpd import Limits, serve

    stop = asyncio.Event()
    servers = []
    if args.probe_listen:
        probes = Limits(max_connections=32, max_body_bytes=4096, max_buffered_bytes=1024 * 1024)
        label = "kgwe webhook probes (GET /healthz /readyz) on"
        host, port = _address(args.probe_listen, "--probe-listen")
        servers.append(serve(_probe_handler(tls), host, port, limits=probes, stop=stop, label=label))

    async def webhook() -> None:
        if not tls.loaded:
            waiting = threading.Event()
            watcher = asyncio.ensure_future(stop.wait())
            watcher.add_done_callback(lambda _: waiting.set())
            what = "the Secret mounted there is written by the KGWE controller or cert-manager"
            poll = min(1.0, args.tls_check_seconds)
            loaded = await asyncio.to_thread(tls.wait, waiting, poll, what)
            watcher.cancel()
            if not loaded:
                return
        await serve(
            make_handler(args.scheduler_name),
            *address,
            limits=LIMITS,
            tls=tls.current,
            stop=stop,
            label="kgwe webhook listening on",
        )

    servers.append(webhook())
    await asyncio.gather(*servers)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    host, port = _address(args.listen, "--listen")
    check_client_auth(
        "kgwe webhook",
        host,
        tls=True,
        client_ca=bool(args.client_ca_file),
        insecure_any_client=args.insecure_any_client,
    )
    ca = Path(args.client_ca_file) if args.client_ca_file else None
    if not 0 < args.tls_check_seconds < float("inf"):
        raise KgweError(f"--tls-check-seconds must be a positive number, not {args.tls_check_seconds:g}")
    tls = ServingTLS(args.tls_cert_file, args.tls_key_file, ca, check_seconds=args.tls_check_seconds)
    if not tls.missing() and not tls.reload(force=True):
        raise KgweError(f"cannot serve with {args.tls_cert_file}: {tls.last_error}")
    try:
        asyncio.run(_serve(args, tls, (host, port)))
    except OSError as exc:
        raise KgweError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None
    return 0
