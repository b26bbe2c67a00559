"""Who may reach a port, decided once for every KGWE server: TLS serving contexts, and the rule that a port
serving clients it cannot identify is a choice the operator makes out loud.

- An API port (the extender's /filter, the admission webhook) with a certificate but no client CA would
  serve TLS to anyone, and plain HTTP on an address other than loopback serves anyone on the network: both
  refuse to start unless `--insecure-any-client` says so. Plain HTTP on 127.0.0.1/::1 stays allowed (only
  processes of the same pod, or host, reach it: the extender as a sidecar of kube-scheduler).
- `/metrics` on an address other than loopback needs a bearer token the API server accepts
  (kgwe.httpd.access), unless `--insecure-public-metrics` says anyone may read it.
"""

from __future__ import annotations

import ipaddress
import ssl

from kgwe.errors import KgweError

INSECURE_ANY_CLIENT = "--insecure-any-client"
INSECURE_PUBLIC_METRICS = "--insecure-public-metrics"


def is_loopback(host: str) -> bool:
    """True for addresses only this host can reach (127.0.0.0/8, ::1, localhost)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def server_tls_context(cert_file: str, key_file: str, client_ca_file: str | None = None) -> ssl.SSLContext:
    """HTTPS serving context (TLS >= 1.2); with a client CA, a verified client certificate is required."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.load_verify_locations(cafile=client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def check_client_auth(what: str, host: str, *, tls: bool, client_ca: bool, insecure_any_client: bool) -> None:
    """Refuse to serve `what` to clients nobody verifies, unless the operator said so."""
    if insecure_any_client:
        return
    if tls and not client_ca:
        raise KgweError(
            f"{what}: TLS without --client-ca-file would serve any client; give --client-ca-file (the CA "
            f"of the clients' certificates), or {INSECURE_ANY_CLIENT} to serve unverified clients on purpose"
        )
    if not tls and not is_loopback(host):
        raise KgweError(
            f"{what}: plain HTTP on {host} would serve anyone who reaches it; listen on 127.0.0.1 (a "
            f"sidecar), serve TLS with --client-ca-file, or give {INSECURE_ANY_CLIENT} to serve anyone "
            "on purpose"
        )


def metrics_need_token(host: str, insecure_public_metrics: bool) -> bool:
    """Does /metrics on `host` need a reviewed token? Not on loopback, and not when the operator opened it."""
    return not insecure_public_metrics and not is_loopback(host)
