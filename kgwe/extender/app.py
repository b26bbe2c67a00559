"""Routes of the extender: /filter, /prioritize, /healthz, /readyz, /metrics; Prometheus metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from kgwe.extender.core import Reason
from kgwe.extender.engine import UNKNOWN_CODE, Engine
from kgwe.extender.request import RequestError
from kgwe.httpd import JSON, Handler, error_body

# ExtenderArgs with 5,000 node names (~40-character names) and a fat pod (4 containers with 64 env vars
# each, 32 long annotations, managedFields) measures about 0.27 MiB; 1 MiB leaves room for longer names
# and bigger pods, and bounds memory at max-connections x 1 MiB.
MAX_REQUEST_BYTES = 1024 * 1024
PROBE_PATHS = frozenset(("/healthz", "/readyz", "/metrics"))
_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "kgwe_extender_request_seconds",
            "Time to answer an extender call",
            ["verb"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "kgwe_extender_requests_total",
            "Extender calls by verb and HTTP status",
            ["verb", "code"],
            registry=self.registry,
        )
        self.failed_nodes = Counter(
            "kgwe_extender_failed_nodes_total",
            "Nodes listed as failed by filter answers that left a pod no node",
            registry=self.registry,
        )
        self.filter_failures = Counter(
            "kgwe_extender_filter_failures_total",
            "Nodes listed as failed by filter answers that left a pod no node, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.nodes = Gauge("kgwe_extender_nodes", "Nodes in the index", registry=self.registry)
        self.ready = Gauge("kgwe_extender_ready", "1 once the index is synced", registry=self.registry)
        self.watch_restarts = Counter(
            "kgwe_extender_watch_restarts_total",
            "Watch restarts (410 Gone, errors)",
            ["kind"],
            registry=self.registry,
        )
        self.assumed = Gauge(
            "kgwe_extender_assumed_pods",
            "Pods counted on the node filter left them, their bind not yet seen",
            registry=self.registry,
        )
        self.assumptions_expired = Counter(
            "kgwe_extender_assumptions_expired_total",
            "Assumed pods never seen bound within the assume window (bind failed, or another scheduler)",
            registry=self.registry,
        )
        self.profile_reloads = Counter(
            "kgwe_extender_profile_reloads_total", "kgwe-scoring reloads", ["result"], registry=self.registry
        )


def _after_reply(engine: Engine) -> None:
    """Make the decision's assumption once the reply is on its way (the next event-loop turn): the
    bookkeeping then is not part of kube-scheduler's wait for the answer."""
    try:
        asyncio.get_running_loop().call_soon(engine.flush_assumptions)
    except RuntimeError:  # called outside the server's loop
        engine.flush_assumptions()


def make_handler(engine: Engine, metrics: Metrics | None = None) -> Handler:
    metrics = metrics or Metrics()
    engine.defer_assumptions = True
    engine.on_decision = lambda verb, failed: metrics.failed_nodes.inc(failed) if failed else None
    engine.on_failures = failure_counter(metrics)
    verbs = {"/filter": engine.filter, "/prioritize": engine.prioritize}
    observe = {v: metrics.latency.labels(v.strip("/")) for v in verbs}
    counted: dict[tuple[str, int], Any] = {}

    def count(verb: str, code: int) -> None:
        key = (verb, code)
        c = counted.get(key)
        if c is None:
            c = counted[key] = metrics.requests.labels(verb, str(code))
        c.inc()

    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        fn = verbs.get(path)
        if fn is not None:
            if method != "POST":
                count(path[1:], 405)
                return 405, error_body(f"{path} accepts POST"), JSON
            t0 = time.perf_counter()
            try:
                reply = fn(body)
            except RequestError as exc:
                count(path[1:], 400)
                return 400, error_body(str(exc)), JSON
            observe[path].observe(time.perf_counter() - t0)
            if engine.deferred:
                _after_reply(engine)
            count(path[1:], 200)
            return 200, reply, JSON
        if path.startswith("/debug/nodes/") and method == "GET":
            view = engine.node_view(path[len("/debug/nodes/") :])
            if view is None:
                return 404, error_body("node not in the index"), JSON
            return 200, orjson.dumps(view), JSON
        if path in PROBE_PATHS:
            return probes(method, path, body)
        return (
            404,
            error_body(f"no route {path}; use /filter, /prioritize, /healthz, /readyz, /metrics"),
            JSON,
        )

    probes = make_probe_handler(engine, metrics)
    return handle


def failure_counter(metrics: Metrics) -> Callable[[np.ndarray], None]:
    """Counts rejected nodes by reason (the reason's name, lower case: a bounded label)."""
    names = {int(r): r.name.lower() for r in Reason if r != Reason.OK} | {UNKNOWN_CODE: "unknown_node"}
    children = {code: metrics.filter_failures.labels(name) for code, name in names.items()}

    def count(codes: np.ndarray) -> None:
        values, counts = np.unique(codes, return_counts=True)
        for code, n in zip(values.tolist(), counts.tolist(), strict=True):
            child = children.get(code)
            if child is not None:
                child.inc(n)

    return count


def make_probe_handler(engine: Engine, metrics: Metrics) -> Handler:
    """Only GET /healthz, /readyz and /metrics: what a plain-HTTP probe port may answer beside the mTLS
    port (kubelet probes and Prometheus carry no client certificate)."""

    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        if path not in PROBE_PATHS:
            return 404, error_body(f"no route {path}; use /healthz, /readyz, /metrics"), JSON
        if method != "GET":
            return 405, error_body(f"{path} accepts GET"), JSON
        if path == "/healthz":
            return 200, b'{"status":"ok"}', JSON
        if path == "/readyz":
            if engine.ready:
                return 200, b'{"status":"ready"}', JSON
            return 503, error_body("index not synced yet"), JSON
        metrics.nodes.set(len(engine.table.rows))  # /metrics
        metrics.ready.set(1 if engine.ready else 0)
        return 200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST.encode()

    return handle
