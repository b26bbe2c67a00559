"""Bounded retries with exponential backoff, and interval jitter.

Pure helpers: the random source and the sleep function are passed in, so tests and benchmarks control
them and no caller ever waits longer than the bound it asked for.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def backoff_delays_seconds(
    attempts: int, *, base_seconds: float = 0.5, cap_seconds: float = 30.0, rng: random.Random | None = None
) -> Iterator[float]:
    """Delays between `attempts` tries: base·2^n capped, with equal jitter (a uniform draw from the upper half
    of each delay) when an rng is given."""
    for n in range(max(0, attempts - 1)):
        delay = min(cap_seconds, base_seconds * (2**n))
        yield rng.uniform(delay / 2, delay) if rng is not None else delay


def with_retries(
    action: Callable[[], T],
    *,
    attempts: int,
    retry_on: Callable[[Exception], bool],
    base_seconds: float = 0.5,
    cap_seconds: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """Run `action` up to `attempts` times; only errors `retry_on` accepts are retried; the last is raised."""
    delays = backoff_delays_seconds(attempts, base_seconds=base_seconds, cap_seconds=cap_seconds, rng=rng)
    while True:
        try:
            return action()
        except Exception as exc:
            if not retry_on(exc):
                raise
            delay = next(delays, None)
            if delay is None:
                raise
            sleep(delay)


def jittered_interval_seconds(interval_seconds: float, jitter_fraction: float, rng: random.Random) -> float:
    """The next poll delay: interval ± jitter_fraction·interval, so many controllers do not poll in step."""
    if interval_seconds <= 0:
        raise ValueError("interval must be positive")
    spread = interval_seconds * max(0.0, min(jitter_fraction, 1.0))
    return max(0.001, interval_seconds + rng.uniform(-spread, spread))
