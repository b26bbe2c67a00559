"""The work queue: one entry per key, delays where an earlier wish wins, a key held by one worker at a time
and queued again after it when wanted meanwhile, per-key exponential backoff with full jitter, and the
overall rate limit."""

from __future__ import annotations

import random
import threading

from kgwe.runtime.queue import Backoff, RateLimit, WorkQueue


class Clock:
    """A clock the test moves (the queue is told time, so no test waits for it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_is_queued_once_and_the_earlier_wish_wins():
    clock = Clock()
    q = WorkQueue(clock=clock)
    q.add("ns/a")
    q.add("ns/a")
    q.add("ns/b", after_seconds=5)
    assert q.get(0) == "ns/a"
    q.done("ns/a")
    assert q.get(0) is None  # b is not due yet, and a was queued once
    q.add("ns/b", after_seconds=60)  # a later wish does not push b back
    clock.now += 5
    assert q.get(0) == "ns/b"
    q.done("ns/b")
    q.add("ns/c", after_seconds=600)
    q.add("ns/c")  # an earlier wish wins
    assert q.get(0) == "ns/c"


def test_a_key_wanted_while_a_worker_holds_it_comes_again_after_the_worker():
    q = WorkQueue(clock=Clock())
    q.add("k")
    assert q.get(0) == "k"
    q.add("k")  # an event while it is reconciled
    assert q.get(0) is None  # never to a second worker at the same time
    assert q.pending("k")
    q.done("k")
    assert q.get(0) == "k"
    q.done("k")
    assert not q.pending("k") and q.idle()


def test_a_waiting_worker_wakes_when_a_key_comes():
    q = WorkQueue()
    got: list[str | None] = []
    started = threading.Event()

    def worker() -> None:
        started.set()
        got.append(q.get(30.0))

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait(5)
    q.add("ns/x")
    thread.join(30)
    assert got == ["ns/x"]


def test_backoff_doubles_to_its_cap_with_full_jitter():
    backoff = Backoff(base_seconds=1.0, cap_seconds=30.0)
    assert [backoff.ceiling(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    rng = random.Random(7)
    delays = [backoff.delay(6, rng) for _ in range(200)]
    assert all(0 <= d <= 30 for d in delays)
    # full jitter: spread over the whole range, not its upper half (equal jitter)
    assert min(delays) < 5 and max(delays) > 25


def test_failures_back_off_per_key_and_a_success_forgets_them():
    clock = Clock()
    limit = RateLimit(1000.0, 1000, clock)
    q = WorkQueue(backoff=Backoff(1.0, 300.0), limit=limit, rng=random.Random(1), clock=clock)
    ceilings = []
    for failures in range(1, 6):
        delay = q.retry("bad")
        ceilings.append(q.backoff.ceiling(failures))
        assert 0 <= delay <= ceilings[-1]
        assert q.failures("bad") == failures
    assert ceilings == [1, 2, 4, 8, 16]
    assert q.retry("other") <= 1.0  # another key starts at the bottom
    q.forget("bad")
    assert q.failures("bad") == 0 and q.retry("bad") <= 1.0


def test_a_retry_waits_at_most_the_cap_it_is_given():
    clock = Clock()
    q = WorkQueue(backoff=Backoff(100.0, 1000.0), limit=RateLimit(1000.0, 1000, clock), clock=clock)
    assert q.retry("k", cap_seconds=5.0) <= 5.0


def test_the_rate_limit_spaces_retries_past_the_burst():
    clock = Clock()
    limit = RateLimit(per_second=10.0, burst=3, clock=clock)
    assert [limit.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [round(limit.reserve(), 3) for _ in range(2)] == [0.1, 0.2]
    clock.now += 10  # refilled, up to the burst
    assert limit.reserve() == 0.0
    q = WorkQueue(backoff=Backoff(0.001, 0.001), limit=RateLimit(1.0, 1, clock), clock=clock)
    assert q.retry("a") <= 0.001
    assert q.retry("b") >= 0.5  # the backoff is tiny, the bucket is empty: it waits for a token
