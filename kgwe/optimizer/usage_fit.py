"""The usage model refitted inside the controller (the registry's `fit` for "usage"): the DCGM series of the
last FIT_DAYS from Prometheus, each metered pod in its groups, and the model's held-out coverage on them.

An edge: it reads Prometheus and the cost store; the model itself is kgwe.optimizer.usage.
"""

from __future__ import annotations

from datetime import timedelta

from kgwe.cost.service import held_pods
from kgwe.cost.usage import Period
from kgwe.optimizer.record import ModelRecord
from kgwe.optimizer.registry import FitInput
from kgwe.optimizer.report_insights import groups_of
from kgwe.optimizer.usage import MODEL_NAME, capacity_of, fit, holdout_coverage, to_params

FIT_DAYS = 14  # Prometheus keeps 15 days by default: what it still has
VERSION = 1


def fit_usage(data: FitInput) -> ModelRecord | None:
    """None without a Prometheus (no series to learn from)."""
    if not data.prometheus_url:
        return None
    from kgwe.cost.prometheus import PrometheusClient

    window = Period(data.now - timedelta(days=FIT_DAYS), data.now)
    series, skipped = PrometheusClient(data.prometheus_url).pod_utilization(window.since, window.until)
    held = held_pods(data.store, window, None)
    rows = []
    for s in series:
        pod = held.get((s.namespace, s.pod))
        if pod is not None:
            rows.append((s, groups_of(pod), capacity_of(pod.gpu_product, pod.gpus)))
    model = fit(rows)
    memory, compute, scored = holdout_coverage(model)
    metrics = {"held_out_pods": float(scored)}
    if scored:
        metrics |= {"p90_coverage_memory": memory, "p90_coverage_compute": compute}
    watched = len(model.peers)
    notes = [f"{len(rows)} metered pod(s) with DCGM series; {watched} watched beyond their first hour"]
    if skipped:
        notes.append(f"{skipped} garbage point(s) or series skipped")
    return ModelRecord(
        name=MODEL_NAME,
        version=VERSION,
        fitted_at=data.now,
        since=window.since,
        until=window.until,
        samples=len(model.peers),
        metrics=metrics,
        params=to_params(model),
        notes=tuple(notes),
    )
