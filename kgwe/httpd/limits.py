"""The bounds of one HTTP server: each is a defence against a client that reaches the port (see
kgwe.httpd.server for what happens at each bound)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_CONNECTIONS = 256  # kube-scheduler keeps a handful of keep-alive connections; the rest is room
MAX_HEADER_BYTES = 16 * 1024  # request line + headers; a service-account token is ~1 KiB
MAX_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """`header_timeout_seconds`: the request line and every header must arrive within this of the request's
    first byte (of the connection's start for a first request, so a TLS handshake counts too), however
    the bytes are spread; `request_timeout_seconds`: the same for the whole request with its body;
    `idle_timeout_seconds`: a keep-alive connection between requests. `max_buffered_bytes` bounds the
    unfinished requests of all connections together, so memory stays bounded whatever the body cap."""

    header_timeout_seconds: float = 5.0
    request_timeout_seconds: float = 10.0
    idle_timeout_seconds: float = 120.0
    max_connections: int = MAX_CONNECTIONS
    max_header_bytes: int = MAX_HEADER_BYTES
    max_body_bytes: int = MAX_BODY_BYTES
    max_buffered_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if not 0 < self.header_timeout_seconds <= self.request_timeout_seconds:
            raise ValueError("need 0 < header_timeout_seconds <= request_timeout_seconds")
        if self.max_buffered_bytes < self.max_header_bytes + self.max_body_bytes:
            raise ValueError("max_buffered_bytes must hold at least one largest request")
