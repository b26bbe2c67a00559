"""Who may read a guarded path (`/metrics`: budgets, costs, scheduling counts): kube-rbac-proxy's model in
the server itself. The client sends `Authorization: Bearer <token>`; the API server says who the token is
(TokenReview) and whether that user may `get` the path (SubjectAccessReview of a nonResourceURL), as it
does for its own /metrics. So Prometheus scrapes with its service-account token and a ClusterRole
granting `get` on `/metrics` (kube-prometheus's own role has it), and nobody else reads anything.

Answers are remembered (allowed for `allow_ttl_seconds`, refused for `deny_ttl_seconds`, at most
`max_entries` tokens, by a hash of path and token), so a scrape every few seconds costs the API server two
reviews a minute. Reviews run on a small thread pool, never on the event loop; at most `max_in_flight` at
once, beyond that a request is answered 503 at once, so a flood of made-up tokens costs the API server a
bounded trickle of reviews and never delays anyone else's request.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from cachetools import TLRUCache

MAX_TOKEN_BYTES = 8192  # service-account JWTs are ~1 KiB; OIDC ones a few


@dataclass(frozen=True)
class Verdict:
    status: int  # 200 allowed; 401 no valid token; 403 not allowed; 503 could not ask
    message: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


ALLOWED = Verdict(200)
# (token, path) -> Verdict; runs on a worker thread (an API call)
Reviewer = Callable[[str, str], Verdict]


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_BYTES:
        return None
    return token


class AccessGuard:
    """Decides GETs of `paths`; `check` answers from memory, `submit` asks the reviewer."""

    def __init__(
        self,
        reviewer: Reviewer,
        paths: frozenset[str] = frozenset({"/metrics"}),
        *,
        allow_ttl_seconds: float = 60.0,
        deny_ttl_seconds: float = 10.0,
        max_entries: int = 1024,
        max_in_flight: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reviewer = reviewer
        self.paths = paths
        self.allow_ttl_seconds = allow_ttl_seconds
        self.deny_ttl_seconds = deny_ttl_seconds
        self.max_entries = max_entries
        self.max_in_flight = max_in_flight
        self.clock = clock
        self.reviews = 0  # reviews asked of the API server (for tests and benchmarks)
        # by hash of path and token: each verdict for its own time, the least recently used dropped first
        self._memory: TLRUCache[bytes, Verdict] = TLRUCache(
            maxsize=max_entries, ttu=self._expiry, timer=lambda: self.clock()
        )
        self._lock = threading.Lock()
        self._in_flight = 0
        self._pool: ThreadPoolExecutor | None = None

    def _expiry(self, _key: bytes, verdict: Verdict, now: float) -> float:
        return now + (self.allow_ttl_seconds if verdict.allowed else self.deny_ttl_seconds)

    def _key(self, token: str, path: str) -> bytes:
        return hashlib.sha256(f"{path}\0{token}".encode()).digest()

    def check(self, path: str, authorization: str | None) -> Verdict | None:
        """The verdict without asking anyone, or None when the API server must be asked."""
        token = bearer_token(authorization)
        if token is None:
            return Verdict(401, f"{path} needs Authorization: Bearer <token> (a service-account token)")
        key = self._key(token, path)
        with self._lock:
            return self._memory.get(key)

    def submit(self, path: str, authorization: str | None, done: Callable[[Verdict], None]) -> bool:
        """Ask the reviewer on a worker thread and call `done(verdict)` there; False (nothing asked) when
        `max_in_flight` reviews are already running."""
        token = bearer_token(authorization)
        if token is None:
            return False
        with self._lock:
            if self._in_flight >= self.max_in_flight:
                return False
            self._in_flight += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.max_in_flight, thread_name_prefix="kgwe-review"
                )
        self._pool.submit(self._review, token, path, done)
        return True

    def _review(self, token: str, path: str, done: Callable[[Verdict], None]) -> None:
        try:
            verdict = self.reviewer(token, path)
        except Exception as exc:  # the reviewer's bug must not leave a request waiting forever
            verdict = Verdict(503, f"cannot review the token: {type(exc).__name__}")
        with self._lock:
            self._in_flight -= 1
            self.reviews += 1
            if verdict.status != 503:  # an outage is not remembered: the next scrape asks again
                self._memory[self._key(token, path)] = verdict
        done(verdict)
