"""With tracing on, a reconcile on the real control plane is one trace: fetch, validate, plan and render,
diff and apply, and the rollout wave as children of the reconcile span."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kgwe.observability import tracing
from kgwe.reconcile.repository import RepositoryReconciler

SYSTEM_NS = "kgwe-system"  # where the e2e fixture creates PolicyRepositories

pytestmark = pytest.mark.cluster


def test_a_reconcile_is_one_trace_of_its_steps(k8s_api, e2e, kgwe_mig_manager):
    e2e.make_nodes(1)
    e2e.remote.commit(e2e.base)
    e2e.make_repository()
    exporter = InMemorySpanExporter()
    assert tracing.configure("kgwe-test", exporter=exporter)
    try:
        RepositoryReconciler(k8s_api, SYSTEM_NS, e2e.pool, cache_dir=e2e.tmp / "cache").reconcile()
    finally:
        tracing.disable()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    root = spans["kgwe.reconcile"]
    assert root.attributes["kgwe.repository"] == f"{SYSTEM_NS}/{e2e.pool}"
    steps = ("fetch", "validate", "plan_render", "plan", "diff_apply", "rollout_wave")
    for step in steps:
        child = spans[f"kgwe.reconcile.{step}"]
        assert child.context.trace_id == root.context.trace_id, step
    assert spans["kgwe.reconcile.fetch"].parent.span_id == root.context.span_id
    assert spans["kgwe.reconcile.plan"].parent.span_id == spans["kgwe.reconcile.plan_render"].context.span_id
