"""Model records and finished runs in the cost store's database (SQLite and PostgreSQL), and the
controller's refit duty on top of it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from kgwe.cost.store import CostStore
from kgwe.optimizer.history import FinishedRun
from kgwe.optimizer.record import ModelRecord
from kgwe.optimizer.registry import FitInput, ModelEntry
from kgwe.optimizer.service import OptimizerDuties
from kgwe.optimizer.store import KEEP_RECORDS, ModelStore

T = datetime(2026, 5, 1, tzinfo=UTC)


def rec(name: str, at: datetime, samples: int = 10) -> ModelRecord:
    return ModelRecord(name, 1, at, at - timedelta(days=7), at, samples, {"p90_coverage": 0.9}, {"k": [1, 2]})


def run(uid: str, start_h: float, hours: float, **kw) -> FinishedRun:
    base = dict(
        uid=uid,
        namespace="ml-research",
        workload=f"wl-{uid}",
        runtime="torch-distributed",
        workload_type="training",
        shape="whole:1",
        pods=2,
        gpu_milli=2000,
        started=T + timedelta(hours=start_h),
        ended=T + timedelta(hours=start_h + hours),
        outcome="Complete",
    )
    base.update(kw)
    return FinishedRun(**base)


def test_the_newest_record_wins_and_old_ones_are_pruned(store):
    models = ModelStore(store)
    assert models.latest("runtime") is None
    for i in range(KEEP_RECORDS + 5):
        models.save(rec("runtime", T + timedelta(hours=i), samples=i))
    models.save(rec("mig-demand", T))
    assert models.latest("runtime").samples == KEEP_RECORDS + 4
    assert len(models.history("runtime", 10_000)) == KEEP_RECORDS
    assert models.names() == ["mig-demand", "runtime"]


def test_an_unreadable_stored_record_is_skipped_for_the_one_before(store):
    models = ModelStore(store)
    models.save(rec("runtime", T, samples=3))
    with store.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO kgwe_model (name, fitted_s, record) VALUES ('runtime', :t, '{broken')"),
            {"t": int((T + timedelta(hours=1)).timestamp())},
        )
    assert models.latest("runtime").samples == 3


def test_runs_are_kept_once_per_workload_and_absurd_ones_refused(store):
    models = ModelStore(store)
    assert models.record_run(run("a", 0, 2))
    assert models.record_run(run("a", 5, 1))  # the same workload finishing again: the later report
    assert models.record_run(run("b", 1, 3))
    assert not models.record_run(run("c", 4, -1))  # ends before it starts
    assert not models.record_run(run("d", 0, 24 * 400))  # over a year
    assert not models.record_run(run("e", 0, 1, pods=0))
    got = models.runs(T, T + timedelta(days=1))
    assert [(r.uid, r.seconds) for r in got] == [("b", 3 * 3600), ("a", 3600)]
    assert models.run_count() == 2
    assert models.runs(T + timedelta(hours=5), T + timedelta(days=1))[0].uid == "a"


def test_refits_run_on_their_schedule_and_a_failing_fit_keeps_the_last_record(store, monkeypatch):
    clock = [T]
    calls: list[str] = []

    def fit_ok(inp: FitInput) -> ModelRecord:
        calls.append("ok")
        return rec("good", inp.now, samples=calls.count("ok"))

    def fit_broken(inp: FitInput) -> ModelRecord:
        calls.append("broken")
        raise RuntimeError("the data made no sense")

    import kgwe.optimizer.service as service

    fits = {"t:ok": fit_ok, "t:broken": fit_broken}
    monkeypatch.setattr(service, "load", fits.__getitem__)
    entries = (
        ModelEntry("good", "x", fit="t:ok", refit_seconds=3600),
        ModelEntry("bad", "y", fit="t:broken"),
    )
    duties = OptimizerDuties(store, models=entries, now=lambda: clock[0])
    assert duties.refit_due() == ["good"]
    assert duties.record("bad") is None and duties.record("good").samples == 1
    clock[0] += timedelta(minutes=30)
    assert duties.refit_due() == [] and calls == ["ok", "broken"]  # neither is due again yet
    clock[0] += timedelta(minutes=31)
    assert duties.refit_due() == ["good"]
    # a restarted controller predicts at once from the stored record
    again = OptimizerDuties(store, models=entries, now=lambda: clock[0])
    assert again.record("good").samples == 2
    assert replace(again.record("good"), notes=()) == replace(duties.record("good"), notes=())


def test_long_fields_are_cut_to_their_columns(store):
    models = ModelStore(store)
    assert models.record_run(run("x" * 500, 0, 1, workload="w" * 400))
    got = models.runs(T, T + timedelta(days=1))[0]
    assert (got.uid, got.workload) == ("x" * 64, "w" * 253)


def test_nothing_reaches_the_controller_when_the_database_is_away(tmp_path):
    away = CostStore(str(tmp_path / "missing" / "folder" / "cost.db"))
    duties = OptimizerDuties(away, models=(ModelEntry("m", "x", fit="t:never"),))
    duties.run_finished(run("a", 0, 1))  # logged, not raised
    assert duties.record("m") is None and duties.records() == {}
