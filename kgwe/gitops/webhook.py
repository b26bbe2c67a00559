"""`POST /hooks/git`: a signed push notification from GitHub or GitLab that triggers an immediate sync of
the PolicyRepositories whose URL the push names.

Authentication: GitHub signs the raw body with HMAC-SHA256 (`X-Hub-Signature-256: sha256=<hex>`); GitLab
sends the shared secret itself (`X-Gitlab-Token`). Both are compared in constant time. Replays: a delivery
ID (`X-GitHub-Delivery`, `X-Gitlab-Event-UUID`) or a signed body seen before is refused (409); the memory
of both is bounded (the oldest are forgotten first). Every bad request gets a 4xx JSON body that says what
was wrong; nothing is triggered for it.

The server (`ControllerHTTPServer`) also answers the GET routes the controller registers (metrics,
health), on KGWE's one server (kgwe.httpd): deadlines per request, a bounded connection table that evicts
rather than refuses, so slow clients cannot starve /healthz; with a guard, /metrics needs a token the API
server accepts. Pushes are handed to one worker thread through a bounded queue (the hook answers at once;
a full queue is 503).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from cachetools import FIFOCache

from kgwe.httpd import JSON, AccessGuard, Limits, ServerThread, WithHeaders, error_body

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20  # GitHub caps payloads at 25 MB; pushes are far smaller, so 1 MiB is plenty
SIGNATURE_HEADER = "X-Hub-Signature-256"
GITLAB_TOKEN_HEADER = "X-Gitlab-Token"
DELIVERY_HEADERS = ("x-github-delivery", "x-gitlab-event-uuid")
REMEMBERED_DELIVERIES = 4096
# kubelet probes, Prometheus and Git hosts' pushes: a few connections at a time
LIMITS = Limits(max_connections=64, max_body_bytes=MAX_BODY_BYTES, max_buffered_bytes=32 * MAX_BODY_BYTES)
PUSH_QUEUE = 16
_SCP_LIKE = re.compile(r"^(?:[\w.-]+@)?(?P<host>[\w.-]+):(?P<path>(?!//).+)$")


@dataclass(frozen=True)
class PushEvent:
    ref: str | None  # e.g. refs/heads/main; None for events without one (ping)
    after: str | None  # new commit id
    event: str  # X-GitHub-Event (push, ping, ...) or "push" when absent
    changed_paths: tuple[str, ...] = ()
    repositories: frozenset[str] = frozenset()  # repository_key() of every URL the push names


@dataclass(frozen=True)
class HookResponse:
    status: int
    body: dict[str, Any] = field(default_factory=dict)
    event: PushEvent | None = None  # set only when a sync should be triggered


def repository_key(url: str) -> str | None:
    """One key for the https, ssh and scp-like spellings of a repository: `host/path`, lower-case, without
    `.git`, user, port or trailing slash (`https://GitHub.com/a/b.git`, `ssh://git@github.com:22/a/b`
    and `git@github.com:a/b` all give `github.com/a/b`). Local paths are their own key. None if empty."""
    url = (url or "").strip()
    if not url:
        return None
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme == "file":
            host, path = "", parts.path
        else:
            host, path = (parts.hostname or ""), parts.path
    elif (m := _SCP_LIKE.match(url)) and not url.startswith(("/", ".")):
        host, path = m.group("host"), m.group("path")
    else:
        host, path = "", url
    path = path.strip("/").removesuffix(".git").rstrip("/")
    return f"{host.lower()}/{path.lower()}" if host else "/" + path


def _named_repositories(payload: Mapping[str, Any]) -> frozenset[str]:
    """URLs a GitHub (repository.*) or GitLab (project.*, repository.*) push names, as repository keys."""
    urls: list[str] = []
    for section, keys in (
        ("repository", ("clone_url", "ssh_url", "git_url", "html_url", "url", "git_http_url", "git_ssh_url")),
        ("project", ("git_http_url", "git_ssh_url", "http_url", "ssh_url", "web_url")),
    ):
        obj = payload.get(section)
        if isinstance(obj, dict):
            urls += [v for k in keys if isinstance(v := obj.get(k), str) and len(v) < 2048]
    return frozenset(k for u in urls if (k := repository_key(u)))


def sign(secret: bytes, body: bytes) -> str:
    """The header value a sender computes (used by tests and the benchmark)."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header_value: str | None) -> bool:
    if not header_value or not header_value.startswith("sha256="):
        return False
    return hmac.compare_digest(sign(secret, body).encode(), header_value.strip().encode())


class ReplayGuard:
    """Delivery IDs and signed bodies seen before, bounded: `seen(key)` records and says if it was known."""

    def __init__(self, limit: int = REMEMBERED_DELIVERIES) -> None:
        self.limit = limit
        self._seen: FIFOCache[str, None] = FIFOCache(maxsize=limit)  # the oldest forgotten first
        self._lock = threading.Lock()

    def seen(self, *keys: str) -> bool:
        with self._lock:
            if any(k in self._seen for k in keys):
                return True
            for k in keys:
                self._seen[k] = None
            return False


def _authenticate(secret: bytes, lower: Mapping[str, str], body: bytes) -> HookResponse | None:
    """None when the request carries a valid GitHub signature or GitLab token, else the 401."""
    signature = lower.get(SIGNATURE_HEADER.lower())
    token = lower.get(GITLAB_TOKEN_HEADER.lower())
    if signature:
        if verify_signature(secret, body, signature):
            return None
        return HookResponse(401, {"error": f"{SIGNATURE_HEADER} does not match the payload"})
    if token is not None:
        if hmac.compare_digest(token.strip().encode(), secret):
            return None
        return HookResponse(401, {"error": f"{GITLAB_TOKEN_HEADER} is not the webhook secret"})
    return HookResponse(
        401, {"error": f"missing {SIGNATURE_HEADER} (GitHub) or {GITLAB_TOKEN_HEADER} (GitLab)"}
    )


def handle_git_hook(
    secret: bytes, headers: Mapping[str, str], body: bytes, replays: ReplayGuard | None = None
) -> HookResponse:
    """Decide what a webhook request means. Pure but for the replay memory, so every case is unit-testable."""
    lower = {k.lower(): v for k, v in headers.items()}
    if not secret:
        return HookResponse(503, {"error": "webhook secret is not configured; refusing unsigned hooks"})
    if len(body) > MAX_BODY_BYTES:
        return HookResponse(413, {"error": f"payload larger than {MAX_BODY_BYTES} bytes"})
    refused = _authenticate(secret, lower, body)
    if refused is not None:
        return refused
    ctype = lower.get("content-type", "application/json").split(";")[0].strip()
    if ctype != "application/json":
        return HookResponse(415, {"error": f"content type {ctype!r} not supported; use application/json"})
    if replays is not None:
        keys = [f"id:{lower[h]}" for h in DELIVERY_HEADERS if lower.get(h)]
        if replays.seen(*keys, "body:" + hashlib.sha256(body).hexdigest()):
            return HookResponse(409, {"error": "this delivery was already received (replay refused)"})
    try:
        payload = json.loads(body.decode("utf-8")) if body else {}
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return HookResponse(400, {"error": f"payload is not valid JSON: {exc}"})
    if not isinstance(payload, dict):
        return HookResponse(400, {"error": "payload must be a JSON object"})
    gitlab = lower.get("x-gitlab-event")
    event_name = "push" if gitlab in ("Push Hook", "Tag Push Hook") else lower.get("x-github-event", "push")
    if gitlab is not None and event_name != "push":
        event_name = gitlab
    if event_name == "ping":
        return HookResponse(200, {"message": "pong"})
    if event_name != "push":
        return HookResponse(202, {"message": f"event {event_name!r} ignored"})
    repositories = _named_repositories(payload)
    if not repositories:
        return HookResponse(202, {"message": "push names no repository URL; nothing to sync"})
    paths: list[str] = []
    for commit in payload.get("commits") or []:
        if isinstance(commit, dict):
            for key in ("added", "modified", "removed"):
                paths.extend(p for p in commit.get(key) or [] if isinstance(p, str))
    ref = payload.get("ref") if isinstance(payload.get("ref"), str) else None
    after = payload.get("after") if isinstance(payload.get("after"), str) else None
    event = PushEvent(ref, after, event_name, tuple(paths), repositories)
    return HookResponse(202, {"message": "sync triggered", "ref": ref, "after": after}, event)


GetRoute = Callable[[], tuple[int, str, bytes]]


class ControllerHTTPServer:
    """POST /hooks/git plus registered GET routes (e.g. /metrics, /healthz) on one port."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        secret: bytes,
        on_push: Callable[[PushEvent], None],
        get_routes: Mapping[str, GetRoute] | None = None,
        limits: Limits = LIMITS,
        guard: AccessGuard | None = None,
    ) -> None:
        self.secret = secret
        self.on_push = on_push
        self.get_routes = dict(get_routes or {})
        self.replays = ReplayGuard()
        self.guard = guard  # who may GET /metrics (None: anyone who reaches the port)
        self._server = ServerThread(
            WithHeaders(self.handle),
            address,
            limits=limits,
            guard=guard,
            label="kgwe controller webhook/metrics server listening on",
        )
        self._pushes: queue.Queue[PushEvent | None] = queue.Queue(PUSH_QUEUE)
        self._worker: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.port

    def handle(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, bytes]:
        if method == "GET":
            route = self.get_routes.get(path)
            if route is None:
                return 404, error_body(f"no route {path}"), JSON
            status, ctype, data = route()
            return status, data, ctype.encode()
        if method != "POST":
            return 405, error_body("method not allowed"), JSON
        if path != "/hooks/git":
            return 404, error_body(f"no route {path}"), JSON
        result = handle_git_hook(self.secret, headers, body, self.replays)
        if result.event is not None:
            try:
                self._pushes.put_nowait(result.event)
            except queue.Full:
                return 503, error_body("too many pushes waiting; retry later"), JSON
        return result.status, json.dumps(result.body).encode(), JSON

    def _deliver(self) -> None:
        while (event := self._pushes.get()) is not None:
            try:
                self.on_push(event)
            except Exception:  # a failing push must not end the worker
                log.exception("webhook push handling failed")

    def start(self) -> ControllerHTTPServer:
        self._worker = threading.Thread(target=self._deliver, name="kgwe-push", daemon=True)
        self._worker.start()
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
        self._pushes.put(None)
        if self._worker is not None:
            self._worker.join(timeout=5)
