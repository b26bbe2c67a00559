"""The stand-ins' view of kgwe.runtime.watch: one handler for listed objects ("SYNC") and later events.

The stand-ins of the test control plane (the MIG manager and the like) each need "tell me about every object
now and whenever it changes until I am stopped", as client model objects; short watches make them stop
promptly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from kgwe.runtime.watch import list_and_watch

Handler = Callable[[str, Any], None]


def watch_loop(
    list_fn: Callable[..., Any],
    handle: Handler,
    stop: threading.Event,
    *,
    watch_timeout_seconds: int = 5,
    **list_kwargs: Any,  # Any: forwarded to list_and_watch, whose own keywords would reject `object`
) -> None:
    """Call `handle(event_type, obj)` for every listed object ("SYNC") and every later watch event, until
    `stop` is set; gaps (410 Gone, the API server going away during teardown) list again."""

    def listed(items: Sequence[Any]) -> None:
        for item in items:
            handle("SYNC", item)

    list_and_watch(
        list_fn,
        on_list=listed,
        on_event=handle,
        stop=stop,
        raw=False,
        watch_timeout_seconds=watch_timeout_seconds,
        max_backoff_seconds=0.5,
        **list_kwargs,
    )
