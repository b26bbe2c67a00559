"""The work queue of a control loop: keys to reconcile, each at most once in the queue and held by at most
one worker at a time (a key added while it is being reconciled is reconciled again after), optionally
after a delay (an earlier wish wins). Failures are retried after a per-key exponential backoff with full
jitter — a uniform delay in [0, min(cap, base · 2^failures)] (AWS's "full jitter": keys failing together
spread out) — and never faster than the loop's overall rate limit allows (a token bucket), as client-go's
default controller rate limiter does. A success forgets the key's failures."""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Per-key exponential backoff with full jitter."""

    base_seconds: float
    cap_seconds: float

    def ceiling(self, failures: int) -> float:
        """The longest delay after `failures` failures in a row (1 = the first)."""
        return float(min(self.cap_seconds, self.base_seconds * 2 ** min(max(failures - 1, 0), 62)))

    def delay(self, failures: int, rng: random.Random) -> float:
        return rng.uniform(0.0, self.ceiling(failures))


class RateLimit:
    """A token bucket: `per_second` retries on average, `burst` at once; `reserve` says how long the next
    one waits for its token."""

    def __init__(self, per_second: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.per_second)
            self._at = now
            self._tokens -= 1.0
            return max(0.0, -self._tokens / self.per_second)


DEFAULT_BACKOFF = Backoff(base_seconds=1.0, cap_seconds=300.0)
DEFAULT_RATE_LIMIT_PER_SECOND = 10.0  # client-go's default controller rate limiter: 10 per second,
DEFAULT_RATE_LIMIT_BURST = 100  # 100 at once


class WorkQueue:
    def __init__(
        self,
        *,
        backoff: Backoff = DEFAULT_BACKOFF,
        limit: RateLimit | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backoff = backoff
        self.limit = limit or RateLimit(DEFAULT_RATE_LIMIT_PER_SECOND, DEFAULT_RATE_LIMIT_BURST, clock)
        self._rng = rng or random.Random()
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}  # key -> when it is wanted (not handed out yet)
        self._processing: set[str] = set()
        self._parked: dict[str, float] = {}  # key -> when it is wanted again, once its worker is done
        self._failures: dict[str, int] = {}

    def add(self, key: str, after_seconds: float = 0.0) -> None:
        """Reconcile `key` once `after_seconds` have passed (at once: 0), unless it is wanted sooner."""
        at = self._clock() + max(0.0, after_seconds)
        with self._cond:
            if key in self._processing:  # wanted again while a worker holds it: after `done`
                self._parked[key] = min(at, self._parked.get(key, at))
                return
            if key in self._due and self._due[key] <= at:
                return
            self._due[key] = at
            heapq.heappush(self._heap, (at, key))
            self._cond.notify()

    def retry(self, key: str, cap_seconds: float | None = None) -> float:
        """`key` failed: add it after its backoff (at most `cap_seconds`) or the rate limit, the longer;
        returns that delay."""
        with self._cond:
            failures = self._failures[key] = self._failures.get(key, 0) + 1
        delay = self.backoff.delay(failures, self._rng)
        if cap_seconds is not None:
            delay = min(delay, cap_seconds)
        delay = max(delay, self.limit.reserve())
        self.add(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """`key` succeeded: its next failure starts the backoff over."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def get(self, timeout: float) -> str | None:
        """The next key that is due (None after `timeout`); the caller holds it until `done`."""
        deadline = self._clock() + timeout
        with self._cond:
            while True:
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier wish
                now = self._clock()
                if self._heap and self._heap[0][0] <= now:
                    _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    self._processing.add(key)
                    return key
                wait = deadline - now
                if self._heap:
                    wait = min(wait, self._heap[0][0] - now)
                if wait <= 0:
                    return None
                self._cond.wait(wait)

    def done(self, key: str) -> None:
        """The worker let `key` go; if it was wanted again meanwhile, it is queued again."""
        with self._cond:
            self._processing.discard(key)
            at = self._parked.pop(key, None)
        if at is not None:
            self.add(key, at - self._clock())

    def __len__(self) -> int:
        with self._cond:
            return len(self._due)

    def idle(self) -> bool:
        """Nothing due now and nothing being reconciled."""
        now = self._clock()
        with self._cond:
            return not self._processing and all(at > now for at in self._due.values())

    def pending(self, key: str) -> bool:
        """Whether `key` is queued, held by a worker, or wanted again after one."""
        with self._cond:
            return key in self._due or key in self._processing or key in self._parked
