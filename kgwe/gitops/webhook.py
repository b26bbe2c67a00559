"""`POST /hooks/git`: a GitHub-style signed push notification that triggers an immediate sync.

The signature is HMAC-SHA256 of the raw body with the shared secret, sent as
`X-Hub-Signature-256: sha256=<hex>`, compared in constant time. Every bad request gets a 4xx JSON body
that says what was wrong; nothing is triggered for it. The same small server also answers the GET routes
the controller registers (metrics, health), so one Service port serves both.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY_BYTES = 1 << 20  # GitHub caps payloads at 25 MB; pushes are far smaller, so 1 MiB is plenty
SIGNATURE_HEADER = "X-Hub-Signature-256"


@dataclass(frozen=True)
class PushEvent:
    ref: str | None  # e.g. refs/heads/main; None for events without one (ping)
    after: str | None  # new commit id
    event: str  # X-GitHub-Event (push, ping, ...) or "push" when absent
    changed_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class HookResponse:
    status: int
    body: dict = field(default_factory=dict)
    event: PushEvent | None = None  # set only when a sync should be triggered


def sign(secret: bytes, body: bytes) -> str:
    """The header value a sender computes (used by tests and the benchmark)."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header_value: str | None) -> bool:
    if not header_value or not header_value.startswith("sha256="):
        return False
    return hmac.compare_digest(sign(secret, body).encode(), header_value.strip().encode())


def handle_git_hook(secret: bytes, headers: Mapping[str, str], body: bytes) -> HookResponse:
    """Decide what a webhook request means. Pure: no I/O, so every case is unit-testable."""
    lower = {k.lower(): v for k, v in headers.items()}
    if not secret:
        return HookResponse(503, {"error": "webhook secret is not configured; refusing unsigned hooks"})
    if len(body) > MAX_BODY_BYTES:
        return HookResponse(413, {"error": f"payload larger than {MAX_BODY_BYTES} bytes"})
    signature = lower.get(SIGNATURE_HEADER.lower())
    if not signature:
        return HookResponse(401, {"error": f"missing {SIGNATURE_HEADER} header"})
    if not verify_signature(secret, body, signature):
        return HookResponse(401, {"error": f"{SIGNATURE_HEADER} does not match the payload"})
    ctype = lower.get("content-type", "application/json").split(";")[0].strip()
    if ctype != "application/json":
        return HookResponse(415, {"error": f"content type {ctype!r} not supported; use application/json"})
    try:
        payload = json.loads(body.decode("utf-8")) if body else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return HookResponse(400, {"error": f"payload is not valid JSON: {exc}"})
    if not isinstance(payload, dict):
        return HookResponse(400, {"error": "payload must be a JSON object"})
    event_name = lower.get("x-github-event", "push")
    if event_name == "ping":
        return HookResponse(200, {"message": "pong"})
    if event_name != "push":
        return HookResponse(202, {"message": f"event {event_name!r} ignored"})
    paths: list[str] = []
    for commit in payload.get("commits") or []:
        if isinstance(commit, dict):
            for key in ("added", "modified", "removed"):
                paths.extend(p for p in commit.get(key) or [] if isinstance(p, str))
    ref = payload.get("ref") if isinstance(payload.get("ref"), str) else None
    after = payload.get("after") if isinstance(payload.get("after"), str) else None
    event = PushEvent(ref=ref, after=after, event=event_name, changed_paths=tuple(paths))
    return HookResponse(202, {"message": "sync triggered", "ref": ref, "after": after}, event)


GetRoute = Callable[[], tuple[int, str, bytes]]


class ControllerHTTPServer:
    """Threaded HTTP server: POST /hooks/git plus registered GET routes (e.g. /metrics, /healthz)."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        secret: bytes,
        on_push: Callable[[PushEvent], None],
        get_routes: Mapping[str, GetRoute] | None = None,
    ) -> None:
        server_self = self
        self.secret = secret
        self.on_push = on_push
        self.get_routes = dict(get_routes or {})

        class Handler(BaseHTTPRequestHandler):
            server_version = "kgwe"

            def log_message(self, format: str, *args: object) -> None:  # quiet: metrics tell the story
                return

            def _send(self, status: int, ctype: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _json(self, status: int, obj: dict) -> None:
                self._send(status, "application/json", json.dumps(obj).encode())

            def do_GET(self) -> None:
                route = server_self.get_routes.get(self.path.split("?")[0])
                if route is None:
                    self._json(404, {"error": f"no route {self.path}"})
                    return
                self._send(*route())

            def do_POST(self) -> None:
                if self.path.split("?")[0] != "/hooks/git":
                    self._json(404, {"error": f"no route {self.path}"})
                    return
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                except ValueError:
                    self._json(400, {"error": "bad Content-Length"})
                    return
                if length < 0 or length > MAX_BODY_BYTES:
                    self._json(413, {"error": f"payload larger than {MAX_BODY_BYTES} bytes"})
                    return
                body = self.rfile.read(length)
                result = handle_git_hook(server_self.secret, dict(self.headers.items()), body)
                if result.event is not None:
                    server_self.on_push(result.event)
                self._json(result.status, result.body)

            def do_PUT(self) -> None:
                self._json(405, {"error": "method not allowed"})

            do_DELETE = do_PATCH = do_PUT

        self._httpd = ThreadingHTTPServer(address, Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def start(self) -> ControllerHTTPServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kgwe-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
