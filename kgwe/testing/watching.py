"""A restartable list+watch loop for the small in-process controllers of the test control plane.

The stand-ins (the MIG manager and the like) each need "tell me about every object now and
whenever it changes until I am stopped". The kubernetes client's Watch ends on timeouts and 410 Gone, so
this loop re-lists and resumes; it ends promptly after `stop` is set because each watch is short.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Handler = Callable[[str, Any], None]


def watch_loop(
    list_fn: Callable[..., Any],
    handle: Handler,
    stop: threading.Event,
    *,
    watch_timeout_seconds: int = 5,
    **list_kwargs: Any,
) -> None:
    """Call `handle(event_type, obj)` for every listed object ("SYNC") and every later watch event.

    Errors from the API (e.g. the apiserver going away during teardown) end an iteration and the loop
    re-lists after a short pause, unless `stop` is set.
    """
    resource_version: str | None = None
    while not stop.is_set():
        try:
            if resource_version is None:
                listing = list_fn(**list_kwargs)
                for item in listing.items:
                    handle("SYNC", item)
                resource_version = listing.metadata.resource_version
            w = watch.Watch()
            for event in w.stream(
                list_fn,
                resource_version=resource_version,
                timeout_seconds=watch_timeout_seconds,
                allow_watch_bookmarks=True,
                **list_kwargs,
            ):
                if stop.is_set():
                    w.stop()
                    break
                obj = event["object"]
                if event["type"] == "ERROR":  # e.g. 410 Gone delivered in-stream: re-list
                    resource_version = None
                    break
                if event["type"] == "BOOKMARK":  # bookmarks arrive as plain dicts
                    resource_version = w.resource_version or resource_version
                    continue
                resource_version = obj.metadata.resource_version
                handle(event["type"], obj)
        except ApiException as exc:
            if exc.status == 410:
                resource_version = None
                continue
            if not stop.is_set():
                log.debug("watch failed (%s); retrying", exc.reason)
            stop.wait(0.5)
        except Exception as exc:  # connection reset during teardown, handler bugs: keep the loop alive
            if not stop.is_set():
                log.warning("watch loop error: %r", exc)
            stop.wait(0.5)
