"""Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT is set; on, each extender decision is a root span
keyed by the pod's UID (exported to the SDK's in-memory exporter here)."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kgwe.extender.engine import Engine
from kgwe.extender.nodes import NodeState
from kgwe.observability import tracing


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert tracing.configure("kgwe-test", exporter=exporter)
    yield exporter
    tracing.disable()


def test_off_without_the_endpoint(monkeypatch):
    monkeypatch.delenv(tracing.ENDPOINT_ENV, raising=False)
    assert not tracing.configure("kgwe-test")
    assert tracing.TRACER is None
    assert tracing.span("x") is tracing.span("y")  # one shared no-op context, nothing allocated


def test_on_with_the_endpoint(monkeypatch):
    monkeypatch.setenv(tracing.ENDPOINT_ENV, "http://127.0.0.1:1")  # nothing listens: export just fails
    try:
        assert tracing.configure("kgwe-test")
        assert tracing.TRACER is not None
    finally:
        tracing.disable()


def _engine() -> Engine:
    engine = Engine()
    engine.table.upsert(NodeState(name="n1", gpus=8, product="NVIDIA-H100-80GB-HBM3"))
    engine.table.upsert(NodeState(name="n2", gpus=8, product="NVIDIA-H100-80GB-HBM3"))
    return engine


def _args(uid: str) -> bytes:
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
    }
    return orjson.dumps({"Pod": pod, "NodeNames": ["n1", "n2"]})


def test_each_extender_decision_is_a_root_span_with_the_pod_uid(spans):
    engine = _engine()
    with tracing.span("outer"):  # a span already current must not become the decision's parent
        engine.filter(_args("uid-1"))
    engine.prioritize(_args("uid-2"))
    by_name = {s.name: s for s in spans.get_finished_spans()}
    assert set(by_name) == {"outer", "kgwe.extender.filter", "kgwe.extender.prioritize"}
    decision = by_name["kgwe.extender.filter"]
    assert decision.parent is None
    assert decision.attributes["k8s.pod.uid"] == "uid-1"
    assert decision.attributes["k8s.namespace.name"] == "ml"
    assert by_name["kgwe.extender.prioritize"].attributes["k8s.pod.uid"] == "uid-2"


def test_tracing_changes_no_answer(spans):
    traced = _engine().filter(_args("uid-3"))
    tracing.disable()
    assert _engine().filter(_args("uid-3")) == traced
