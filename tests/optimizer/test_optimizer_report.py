"""The optimizer in the cost reports: `kgwe report` with a real SQLite store and DCGM series from a small real
HTTP server speaking Prometheus' range-query API (October's series: dated where no scrape can put them) —
rightsizing on predicted bounds, the predictions report, the classes, and the idle holders in the efficiency
report; the controller's refit with its provenance; and the advisor on plain data."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from kgwe import vocab
from kgwe.cost.insights import HeldPod
from kgwe.cost.rightsizing import MODEL, RULE, UtilizationSeries, size_of
from kgwe.optimizer.report_insights import advise_pods
from tests.cost.test_cost_reports import db as db  # the metered October: train-*, serve-*, nb-* pods
from tests.cost.test_cost_reports import run_report
from tests.harness.dcgm import serve_query_range

START = int(datetime(2026, 10, 10, tzinfo=UTC).timestamp())
MINUTES = 240


def _compute(pod: str, i: int) -> float:
    kind, day = pod.split("-", 1)
    if kind == "train":
        return 3.4  # four GPUs at 85%
    if kind == "serve":
        return 0.25 if (i + int(day)) % 3 == 0 else 0.0  # a burst every three minutes
    return 0.0  # notebooks that hold their GPU and do nothing


def _memory(pod: str, i: int) -> float:
    kind, day = pod.split("-", 1)
    if kind == "serve":
        return 12_000.0 * (1.4 + 0.02 * int(day) if i == 150 + int(day) else 1.0)  # one spike after the hour
    return {"train": 200_000.0, "nb": 4_000.0}[kind]


def _matrix(metric: str) -> bytes:
    namespaces = {"train": "ml-training", "serve": "inference-prod", "nb": "ds-notebooks"}
    result = [
        {
            "metric": {"namespace": namespaces[kind], "pod": f"{kind}-{day}"},
            "values": [
                [START + 60 * i, str((_compute if metric == "compute" else _memory)(f"{kind}-{day}", i))]
                for i in range(MINUTES)
            ],
        }
        for kind in namespaces
        for day in range(0, 20)
    ]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def _answer(path: str) -> bytes:
    return _matrix("compute" if "ENGINE_ACTIVE" in path else "memory")


def test_report_rightsizes_young_pods_on_predicted_bounds_and_lists_idle_holders(db, tmp_path):
    with serve_query_range(_answer) as url:
        assert run_report(db, tmp_path / "out", "--prometheus", url) == 0
    folder = tmp_path / "out" / "reports" / "prod" / "2026-10-01_2026-11-01"
    rows = {r["pod"]: r for r in csv.DictReader(io.StringIO((folder / "rightsizing.csv").read_text()))}
    serve = rows["serve-7"]
    # four hours of history: sized on the bounds learned from the 19 other serve-* pods, which all spiked
    # by 1.4× or more after their first hour; today's rule on its own series would have seen the spike too
    assert serve["basis"] == MODEL and "pods of workload inference-prod/serve" in serve["why"]
    assert float(serve["need_memory_mib"]) >= 12_000 * 1.4
    assert serve["workload_class"] == vocab.WORKLOAD_CLASS_INFERENCE
    assert rows["train-3"]["workload_class"] == vocab.WORKLOAD_CLASS_TRAINING
    nb = rows["nb-2"]
    assert nb["workload_class"] == vocab.WORKLOAD_CLASS_IDLE and nb["idle"] == "True"
    predictions = (folder / "pod-predictions.md").read_text()
    assert "## Resources pods will really use" in predictions and "## Workload classes" in predictions
    assert "usage model: 60 pod(s) of this period watched beyond their first hour" in predictions
    efficiency = (folder / "efficiency.md").read_text()
    idle = efficiency.split("## Idle GPU holders", 1)[1]
    assert "| ds-notebooks | nb-2 |" in idle and "serve-" not in idle and "train-" not in idle
    lines = list(csv.DictReader(io.StringIO((folder / "pod-predictions.csv").read_text())))
    assert {r["kind"] for r in lines} == {"usage", "class"} and len(lines) == 2 * 60


def _series(pod: str) -> UtilizationSeries:
    times = [float(START + 60 * i) for i in range(MINUTES)]
    compute = [_compute(pod, i) for i in range(MINUTES)]
    memory = [_memory(pod, i) for i in range(MINUTES)]
    return UtilizationSeries("ns", pod, compute, memory, times[-1] - times[0], times, times)


def test_idle_notebooks_come_first_and_a_lone_pod_falls_back_to_the_rule():
    h100 = "NVIDIA-H100-80GB-HBM3"
    held = {
        ("ns", "nb-1"): HeldPod(
            "ns", "nb-1", h100, size_of(h100, "whole", 1), 1, Decimal("4.10"), "USD", "lab", "Interactive"
        ),
        ("ns", "serve-1"): HeldPod("ns", "serve-1", h100, size_of(h100, "whole", 1), 1),
    }
    insights = advise_pods([_series("nb-1"), _series("serve-1"), _series("serve-2")], held)
    assert {p.pod for p in insights.predictions} == {"nb-1", "serve-1"}  # serve-2 is not metered
    assert all(r.basis == RULE for r in insights.recommendations)  # two pods: no peers to learn from
    assert all("only 2 pod(s) with history" in (p.fallback or "") for p in insights.predictions)
    nb = insights.classes[("ns", "nb-1")]
    assert nb.name == vocab.WORKLOAD_CLASS_IDLE and nb.declared == vocab.WORKLOAD_CLASS_INTERACTIVE
    assert "too few to bound others" in insights.notes[0]


def test_the_controller_refits_the_usage_model_with_its_provenance(db):
    from kgwe.cost.store import CostStore
    from kgwe.cost.usage import Period
    from kgwe.optimizer.record import ModelRecord
    from kgwe.optimizer.registry import FitInput, entry, load
    from kgwe.optimizer.usage import from_params
    from kgwe.optimizer.usage_fit import FIT_DAYS

    store = CostStore(db)
    now = datetime(2026, 10, 20, 12, tzinfo=UTC)
    try:
        with serve_query_range(_answer) as url:
            fit = load(entry("usage").fit or "")
            record = fit(FitInput(now, store, None, url, None))
        assert fit(FitInput(now, store, None, None, None)) is None  # no Prometheus: nothing to learn from
        window = Period(now - timedelta(days=FIT_DAYS), now)
        metered = {(iv.namespace, iv.pod) for iv in store.usage(window)}
    finally:
        store.close()
    # the series cover all 60 pods; the fit learns from those metered in its 14 days (Oct 6 12:00 on)
    assert 0 < len(metered) < 60 and record.samples == len(metered) and record.until == now
    assert record.metrics["held_out_pods"] == len(metered)
    assert 0.8 <= record.metrics["p90_coverage_memory"] <= 1
    again = ModelRecord.from_json(record.to_json())
    model = from_params(again.params)
    assert model is not None and len(model.peers) == len(metered)
    assert {g for p in model.peers for g in p.groups} >= {"inference-prod/serve", "ds-notebooks"}


def test_an_optimizer_that_fails_leaves_todays_rule_and_says_so(db, tmp_path):
    from kgwe.cost.service import rightsizing
    from kgwe.cost.store import CostStore
    from kgwe.cost.usage import Period

    def broken(series, held):
        raise RuntimeError("boom")

    store = CostStore(db)
    period = Period(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC))
    try:
        with serve_query_range(_answer) as url:
            found, _ = rightsizing(
                store, period, datetime(2026, 10, 20, 12, tzinfo=UTC), url, None, (), broken
            )
    finally:
        store.close()
    assert found.recommendations and all(r.basis == RULE for r in found.recommendations)
    assert "the workload optimizer failed (RuntimeError: boom)" in found.notes[0]


def test_the_registry_evaluates_usage_and_classes_on_the_traces(capsys):
    from kgwe.cli import main

    assert (
        main(
            [
                "optimize",
                "report",
                "--traces",
                "--quick",
                "--model",
                "usage",
                "--model",
                "classes",
                "--output",
                "json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)["traces"]
    assert 0 <= out["usage"]["rightsize_p90_coverage"] <= 1 and out["usage"]["rightsize_pods_held_out"] > 20
    assert out["classes"]["classes_pods_classified"] > 0
