"""The cyclic garbage collector held off while a reconcile converges.

Observing, planning, rendering and rolling out a fleet allocates hundreds of thousands of short-lived objects
(node facts, the inventory, per-GPU plans, one patch per node) and leaves none of them in reference cycles:
reference counting frees them all. Meanwhile the collector's allocation counters would start several full
collections, each scanning the whole heap (the node cache's Nodes included; about 0.1 s of CPU per
collection at 1,250 nodes) for nothing, holding the GIL the rollout's patch threads wait for. It runs again
as soon as the last pass holding it off ends, so cyclic garbage waits one pass at most.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Hold:
    """Counts the passes holding the collector off (several repositories reconcile side by side)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.was_enabled = False


_HOLD = _Hold()


@contextmanager
def collector_held() -> Iterator[None]:
    """No cyclic garbage collection inside; the collector as it was once the last holder leaves."""
    with _HOLD.lock:
        if _HOLD.holders == 0:
            _HOLD.was_enabled = gc.isenabled()
            gc.disable()
        _HOLD.holders += 1
    try:
        yield
    finally:
        with _HOLD.lock:
            _HOLD.holders -= 1
            if _HOLD.holders == 0 and _HOLD.was_enabled:
                gc.enable()
