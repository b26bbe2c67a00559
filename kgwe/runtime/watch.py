"""The one list+watch loop of KGWE's long-running readers (the extender's index, metering, the GPUWorkload
controller, `kgwe fleet watch`, the local cluster's stand-ins).

List, hand every object over, then watch from the list's resourceVersion. A watch the server ends (its
timeout) is resumed from the last version seen, bookmarks included. A watch that can no longer resume — 410
Gone, as an exception or an in-stream ERROR event — lists again at once. Any other failure (connection
dropped, API server restarting, a handler raising) lists again after a pause that doubles up to
`max_backoff_seconds`. It returns only when `stop` is set, within one watch timeout.

`raw=True` hands over plain dicts exactly as the API server sent them (cheap: no client model objects;
the watch stream's lines are split and decoded here with orjson, not by the client's Watch, whose
per-event stdlib decoding and buffer copies were a good part of the extender's CPU per scheduled pod);
`raw=False` the kubernetes client's model objects.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from kgwe.runtime.errors import GONE

log = logging.getLogger(__name__)

MIN_BACKOFF_SECONDS = 0.2


def _listing(list_fn: Callable[..., Any], raw: bool, kwargs: dict[str, object]) -> tuple[Sequence[Any], str]:
    """(items, resourceVersion) of one list call."""
    if raw:
        doc = orjson.loads(list_fn(_preload_content=False, **kwargs).data)
        return doc.get("items") or [], (doc.get("metadata") or {}).get("resourceVersion") or ""
    listing = list_fn(**kwargs)
    return listing.items, listing.metadata.resource_version


def _raw_events(list_fn: Callable[..., Any], kwargs: dict[str, object]) -> Iterator[dict[str, Any]]:
    """The events of one watch call as dicts ({"type", "object"}), one per line of the stream."""
    resp = list_fn(watch=True, _preload_content=False, **kwargs)
    try:
        buf = b""
        for chunk in resp.stream(amt=None, decode_content=False):
            buf = buf + chunk if buf else chunk
            if b"\n" not in chunk:
                continue
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    yield orjson.loads(line)
        if buf.strip():
            yield orjson.loads(buf)
    finally:  # the stream may be mid-way (stop, a handler failing): close it, never pool it
        resp.close()
        resp.release_conn()


def _event_version(event: dict[str, Any]) -> str | None:
    raw = event.get("raw_object") or event.get("object")
    if isinstance(raw, dict):
        return (raw.get("metadata") or {}).get("resourceVersion")
    metadata = getattr(raw, "metadata", None)
    return getattr(metadata, "resource_version", None)


def list_and_watch(
    list_fn: Callable[..., Any],
    *,
    on_list: Callable[[Sequence[Any]], None],
    on_event: Callable[[str, Any], None],
    stop: threading.Event,
    raw: bool = True,
    watch_timeout_seconds: int = 300,
    max_backoff_seconds: float = 5.0,
    on_restart: Callable[[BaseException | None], None] | None = None,
    on_watch_end: Callable[[], bool | None] | None = None,
    **list_kwargs: object,
) -> None:
    """Run until `stop` is set. `on_list(items)` gets the whole listing (first, and after every gap, so it
    must replace what it knew); `on_event(type, object)` every ADDED/MODIFIED/DELETED after it.
    `on_restart(error)` is told each time the loop lists again (error None: the watch expired);
    `on_watch_end()` each time a watch ends normally (a place for periodic work); when it returns True the
    loop lists again at once (the caller's own state must be rebuilt from a fresh listing)."""
    version: str | None = None
    backoff = MIN_BACKOFF_SECONDS
    while not stop.is_set():
        failure: BaseException | None = None
        try:
            if version is None:
                items, version = _listing(list_fn, raw, list_kwargs)
                on_list(items)
            watch_kwargs = {
                "resource_version": version,
                "timeout_seconds": watch_timeout_seconds,
                "allow_watch_bookmarks": True,
                **list_kwargs,
            }
            if raw:
                events = _raw_events(list_fn, watch_kwargs)
            else:
                w = watch.Watch()
                events = w.stream(list_fn, **watch_kwargs)
            for event in events:
                if stop.is_set():
                    if not raw:
                        w.stop()
                    return
                kind = str(event.get("type") or "")
                if kind == "ERROR":  # the watch expired (410 Gone sent in the stream)
                    version = None
                    break
                version = _event_version(event) or version
                if kind != "BOOKMARK":
                    obj = event.get("raw_object") or event.get("object") if raw else event["object"]
                    on_event(kind, obj)
            if version is not None:
                backoff = MIN_BACKOFF_SECONDS
                if on_watch_end is not None and on_watch_end():
                    version = None
                continue
        except ApiException as exc:
            if exc.status != GONE:
                failure = exc
        except KeyError as exc:
            # With deserialize=False the client reads an in-stream ERROR event (410 Gone) through a
            # 'raw_object' key only its decoded events have: that KeyError is the expiry.
            if exc.args != ("raw_object",):
                failure = exc
        except Exception as exc:  # connection reset, API server restarting, a handler failing: list again
            failure = exc
        version = None
        if stop.is_set():
            return
        if on_restart is not None:
            on_restart(failure)
        if failure is None:
            log.debug("watch of %s expired; listing again", getattr(list_fn, "__name__", "objects"))
            continue
        log.warning(
            "watch of %s failed (%s: %s); listing again in %.1f s",
            getattr(list_fn, "__name__", "objects"),
            type(failure).__name__,
            failure,
            backoff,
        )
        stop.wait(backoff)
        backoff = min(backoff * 2, max_backoff_seconds)
