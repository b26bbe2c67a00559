"""`kgwe extender` with its CPU accounted per part: the benchmark's profile of where a pod's time goes.

    python bench/extender_parts.py DUMP.json -- extender --kubeconfig ... --listen ...

Runs the real extender (kgwe.cli) after wrapping the functions that make up each part (`PARTS`) so that
every call adds the CPU time of its thread (CLOCK_THREAD_CPUTIME_ID, not wall time: on a shared machine a
sampling profiler also counts the time a thread waits for a CPU) to its part, minus the time of the parts
called inside it (exclusive time; garbage collection is a part of its own, through gc.callbacks). On SIGUSR1
it writes the totals so far to DUMP.json: {"ns": {part: ns}, "calls": {"Owner.function": n}, "events":
{"kind TYPE": n}};
the benchmark takes one before and one after a phase. What no part covers (thread start-up, the profile's
own clock reads, work between wrapped calls) is what the process's CPU has beyond the parts' sum.

A process of its own because the wrappers cost CPU (two clock reads per wrapped call, ~1-2 us): the
benchmark's headline figures come from the plain extender, this one only says how they divide.
"""

from __future__ import annotations

import asyncio.selector_events
import gc
import logging
import signal
import ssl
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import prometheus_client.metrics

import kgwe.extender.app
import kgwe.extender.engine
import kgwe.extender.index
import kgwe.extender.nodenames
import kgwe.httpd.server
import kgwe.httpd.tls
import kgwe.runtime.watch
from kgwe.extender.engine import Engine
from kgwe.extender.index import ClusterIndex

_clock = time.thread_time_ns
_threads: list[tuple[Counter[str], Counter[str]]] = []  # each thread's (ns, calls): no lock on the hot path
_events: Counter[str] = Counter()
_local = threading.local()


def _mine() -> tuple[list[int], Counter[str], Counter[str]]:
    """This thread's stack of child-time accumulators and its totals."""
    try:
        return _local.stack, _local.ns, _local.calls
    except AttributeError:
        _local.stack, _local.ns, _local.calls = [], Counter(), Counter()
        _threads.append((_local.ns, _local.calls))
        return _local.stack, _local.ns, _local.calls


def timed(part: str, fn: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """`fn` with its exclusive thread CPU time added to `part` and its calls counted under `name`."""
    name = name or getattr(fn, "__qualname__", part)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stack, ns, calls = _mine()
        stack.append(0)
        t0 = _clock()
        try:
            return fn(*args, **kwargs)
        finally:
            elapsed = _clock() - t0
            ns[part] += elapsed - stack.pop()
            calls[name] += 1
            if stack:
                stack[-1] += elapsed

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def timed_generator(part: str, fn: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    """A generator function whose every step (the work to produce one item) counts to `part`."""
    end = object()

    def wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
        it = fn(*args, **kwargs)
        step = timed(part, lambda: next(it, end), "watch step")
        try:
            while (item := step()) is not end:
                yield item
        finally:
            timed(part, it.close, "watch close")()

    return wrapper


def counted(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A watch handler `(type, object)` whose calls are counted by event type."""

    def wrapper(self: Any, typ: str, raw: Any) -> Any:
        _events[f"{kind} {typ}"] += 1
        return fn(self, typ, raw)

    return wrapper


class _TimedJSON:
    """orjson as one module sees it, with loads and dumps counted to parts."""

    def __init__(self, decode: str, encode: str) -> None:
        self.loads = timed(decode, orjson.loads, f"{decode} loads")
        self.dumps = timed(encode, orjson.dumps, f"{encode} dumps")
        self.JSONDecodeError = orjson.JSONDecodeError


def _wrap(owner: Any, name: str, part: str) -> None:
    setattr(owner, name, timed(part, getattr(owner, name), f"{owner.__name__}.{name}"))


# (owner, attribute, part). Order does not matter: nesting is resolved at run time.
PARTS: list[tuple[Any, str, str]] = [
    # the event loop's own turn (epoll, callbacks' dispatch) and the sockets
    (asyncio.base_events.BaseEventLoop, "_run_once", "event_loop"),
    (asyncio.selector_events._SelectorSocketTransport, "_read_ready", "socket"),
    (asyncio.selector_events._SelectorSocketTransport, "write", "socket"),
    # TLS between kube-scheduler and the extender (the mutual-TLS shape): memory BIOs in the server
    (ssl.SSLObject, "do_handshake", "tls_handshake"),
    (kgwe.httpd.tls.TlsSession, "__init__", "tls_handshake"),
    (kgwe.httpd.tls.TlsSession, "feed", "tls"),
    (kgwe.httpd.tls.TlsSession, "wrap", "tls"),
    (kgwe.httpd.tls.TlsSession, "close_notify", "tls"),
    # HTTP: request line, headers, framing, the response head, deadlines
    (kgwe.httpd.server._Conn, "buffer_updated", "http"),
    (kgwe.httpd.server._Conn, "_process", "http"),
    (kgwe.httpd.server._Conn, "_answer", "http"),
    (kgwe.httpd.server._Conn, "connection_made", "http"),
    (kgwe.httpd.server._Conn, "connection_lost", "http"),
    # the request: ExtenderArgs (JSON decode below), the pod, node names -> rows
    (Engine, "_parse", "request"),
    (kgwe.extender.engine, "parse_pod", "pod_parse"),
    (kgwe.extender.engine, "_parse_args", "request"),
    (kgwe.extender.nodenames, "compact_tail", "request"),
    (kgwe.extender.nodenames, "holds", "request"),
    # the decision and its answer
    (Engine, "_filter", "decision"),
    (Engine, "_prioritize", "decision"),
    (Engine, "_failures", "failure_sentences"),
    (Engine, "_priority_json", "json_encode"),
    # after the answer: the decision's assumption and the node it changes
    (Engine, "flush_assumptions", "assume"),
    # watches: reading the stream (TLS from the API server, chunks, lines), then applying each event
    (kgwe.runtime.watch, "_listing", "watch_list"),
    (ClusterIndex, "_node_event", "watch_nodes"),
    (ClusterIndex, "_apply_nodes", "watch_list"),
    (ClusterIndex, "_any_pod_event", "watch_pods"),
    (ClusterIndex, "_apply_all_pods", "watch_list"),
    (ClusterIndex, "_configmap_event", "watch_other"),
    (ClusterIndex, "expire_assumed", "watch_other"),
    # metrics (prometheus_client) and logging
    (prometheus_client.metrics.Histogram, "observe", "metrics"),
    (prometheus_client.metrics.Counter, "inc", "metrics"),
    (prometheus_client.metrics.Gauge, "set", "metrics"),
    (prometheus_client.metrics.Gauge, "inc", "metrics"),
    (prometheus_client.metrics.Gauge, "dec", "metrics"),
    (prometheus_client.metrics.MetricWrapperBase, "labels", "metrics"),
    (kgwe.extender.app, "generate_latest", "metrics"),
    (logging.Logger, "_log", "logging"),
]


def install() -> None:
    for kind, name in (("nodes", "_node_event"), ("pods", "_any_pod_event"), ("scoring", "_configmap_event")):
        setattr(ClusterIndex, name, counted(kind, getattr(ClusterIndex, name)))
    for owner, name, part in PARTS:
        _wrap(owner, name, part)
    kgwe.runtime.watch._raw_events = timed_generator("watch_read", kgwe.runtime.watch._raw_events)
    kgwe.runtime.watch.orjson = _TimedJSON("watch_decode", "watch_decode")  # type: ignore[assignment]
    kgwe.extender.engine.orjson = _TimedJSON("json_decode", "json_encode")  # type: ignore[assignment]
    failure_counter = kgwe.extender.app.failure_counter
    kgwe.extender.app.failure_counter = lambda metrics: timed("metrics", failure_counter(metrics), "failures")

    def on_gc(phase: str, _info: dict) -> None:
        stack, ns, calls = _mine()
        if phase == "start":
            stack.append(0)
            _local.gc_start = _clock()
        elif getattr(_local, "gc_start", None) is not None:
            elapsed = _clock() - _local.gc_start
            _local.gc_start = None
            ns["gc"] += elapsed - stack.pop()
            calls["gc"] += 1
            if stack:
                stack[-1] += elapsed

    gc.callbacks.append(on_gc)


def dump(path: Path) -> None:
    ns: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for n, c in list(_threads):
        ns.update(dict(n))
        calls.update(dict(c))
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps({"ns": ns, "calls": calls, "events": _events}))
    tmp.replace(path)


def main() -> int:
    out, sep, *argv = sys.argv[1:]
    if sep != "--":
        raise SystemExit(__doc__)
    install()
    signal.signal(signal.SIGUSR1, lambda *_: dump(Path(out)))
    from kgwe.cli import main as kgwe_main

    return kgwe_main(argv)


if __name__ == "__main__":
    sys.exit(main())
