"""The one way tests wait: until a condition holds, re-checked whenever the cluster reports a change (a
watch) or, for what no watch covers (a process, a port, a file), at a short poll interval.

    pods = Watched(core.list_namespaced_pod, namespace=ns)
    wait_for("the pod bound", lambda: read_pod().spec.node_name, watch=pods)
    wait_for("the extender listening", lambda: port_open(port))

A fixed sleep longer than `LONGEST_SLEEP_SECONDS` fails the test that takes it (tests.harness.pytest_lanes):
waiting for "nothing else happens" is a wait for the event that proves it (a count of reconciles, of
resyncs, of watch ends, of a scheduler's tries) followed by the assertion.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

from kgwe.runtime.watch import list_and_watch

T = TypeVar("T")

POLL_SECONDS = 0.1  # how often wait_for checks a condition no watch covers (at most)
# The longest fixed sleep a test may take: a pause for what nothing can observe from outside (a server
# reading bytes a client sent), never a wait for something to happen or for nothing else to.
LONGEST_SLEEP_SECONDS = 0.3
_FIRST_POLL_SECONDS = 0.01  # most conditions hold within a few milliseconds of being asked for
WATCH_RECHECK_SECONDS = 1.0  # with a watch, still re-check this often (the condition may read other kinds)


class Watched:
    """Objects of one kind whose every change wakes a wait: `list_fn` is a kubernetes client list call
    (`CoreV1Api.list_namespaced_pod`, `CustomObjectsApi.list_namespaced_custom_object`, ...), its keyword
    arguments as for the list (namespace=, label_selector=, group=/version=/plural= ...)."""

    def __init__(self, list_fn: Callable[..., Any], **list_kwargs: Any) -> None:
        self.list_fn = list_fn
        self.list_kwargs = list_kwargs

    @contextmanager
    def changes(self) -> Iterator[threading.Event]:
        """An Event set on the listing and on every later change, until the block ends."""
        changed, stop = threading.Event(), threading.Event()

        def wake(*_: Any) -> None:
            changed.set()

        thread = threading.Thread(
            target=list_and_watch,
            args=(self.list_fn,),
            kwargs={
                "on_list": wake,
                "on_event": wake,
                "stop": stop,
                "raw": True,
                "watch_timeout_seconds": 5,
                "max_backoff_seconds": 0.5,
                **self.list_kwargs,
            },
            name=f"wait-watch-{getattr(self.list_fn, '__name__', 'objects')}",
            daemon=True,  # ends within one watch timeout after `stop`; nobody needs to wait for that
        )
        thread.start()
        try:
            yield changed
        finally:
            stop.set()
            changed.set()


def nodes_watched(cluster: Any) -> Watched:
    """The Nodes of a KubeCluster's API server (kgwe.runtime.kube), watched: a wait wakes on each change."""
    from kubernetes import client

    return Watched(client.CoreV1Api(cluster.api_client).list_node)


def wait_for(
    what: str,
    check: Callable[[], T],
    timeout_seconds: float = 120.0,
    *,
    watch: Watched | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    describe: Callable[[], str] | None = None,
) -> T:
    """The first truthy value of `check()`; the test fails naming `what` (and `describe()`, the state worth
    seeing) when `timeout_seconds` pass first. Exceptions in `retry_on` count as "not yet"."""
    deadline = time.monotonic() + timeout_seconds
    last: object = None

    def attempt() -> T | None:
        nonlocal last
        try:
            value = check()
        except retry_on as exc:
            last = exc
            return None
        last = value
        return value if value else None

    if watch is not None:
        with watch.changes() as changed:
            while (value := attempt()) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                changed.wait(min(WATCH_RECHECK_SECONDS, remaining))
                changed.clear()
            else:
                return value
    else:
        pause = _FIRST_POLL_SECONDS
        while (value := attempt()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, POLL_SECONDS)
        else:
            return value
    state = f"\n{describe()}" if describe is not None else ""
    pytest.fail(f"timed out after {timeout_seconds:g} s waiting for {what} (last: {last!r}){state}", False)


def repeat_until(
    what: str,
    step: Callable[[], T],
    done: Callable[[T], object],
    timeout_seconds: float = 120.0,
    *,
    watch: Watched | None = None,
    describe: Callable[[], str] | None = None,
) -> T:
    """Run `step()` (a reconcile, as its interval would) until `done(result)`; that result. With `watch`,
    the next step runs when the watched objects change (what a step waits for, e.g. a stand-in's node
    labels), else after the poll interval."""
    last: list[T | None] = [None]

    def attempt() -> T | None:
        last[0] = result = step()
        return result if done(result) else None

    def state() -> str:
        return f"last result: {last[0]!r}" + (f"; {describe()}" if describe is not None else "")

    return wait_for(what, attempt, timeout_seconds, watch=watch, describe=state)
