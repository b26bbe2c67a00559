"""KGWE's one HTTP server (kgwe.httpd.server) and what it is made of: its bounds (limits), its connection
table (table), token-guarded paths (access) and who may reach a port (exposure)."""

from kgwe.httpd.access import AccessGuard, Verdict
from kgwe.httpd.exposure import check_client_auth, is_loopback, metrics_need_token, server_tls_context
from kgwe.httpd.limits import MAX_CONNECTIONS, Limits
from kgwe.httpd.server import JSON, Handler, HeaderHandler, ServerThread, WithHeaders, error_body, serve

__all__ = [
    "JSON",
    "MAX_CONNECTIONS",
    "AccessGuard",
    "Handler",
    "HeaderHandler",
    "Limits",
    "ServerThread",
    "Verdict",
    "WithHeaders",
    "check_client_auth",
    "error_body",
    "is_loopback",
    "metrics_need_token",
    "serve",
    "server_tls_context",
]
