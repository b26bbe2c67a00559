"""`kgwe optimize report`: the fitted records from the database, said plainly; a source is required."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kgwe.cli import main
from kgwe.cost.store import CostStore
from kgwe.optimizer.record import ModelRecord
from kgwe.optimizer.registry import MODELS
from kgwe.optimizer.store import ModelStore


def test_report_prints_each_model_from_the_database(tmp_path, capsys):
    db = tmp_path / "cost.db"
    store = CostStore(str(db))
    store.migrate()
    at = datetime(2026, 5, 1, tzinfo=UTC)
    name = MODELS[0].name
    ModelStore(store).save(
        ModelRecord(name, 1, at, at - timedelta(days=7), at, 42, {"p90_coverage": 0.91}, notes=("a note",))
    )
    store.close()
    assert main(["optimize", "report", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"{name} v1: fitted 2026-05-01T00:00:00Z on 42 sample(s)" in out
    assert "p90_coverage 0.910" in out and "note: a note" in out
    for other in MODELS[1:]:
        assert f"{other.name}: not fitted yet" in out


def test_report_needs_a_source(capsys):
    assert main(["optimize", "report"]) == 1
    assert "--db" in capsys.readouterr().err


def test_an_unknown_model_is_named(capsys):
    assert main(["optimize", "report", "--traces", "--model", "nope"]) == 1
    assert "no optimizer model 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["optimize"], ["optimize", "report", "--output", "xml"]])
def test_usage_errors_exit_2(args):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2


def test_report_on_the_public_traces_prints_held_out_scores(capsys):
    assert main(["optimize", "report", "--traces", "--quick", "--model", "runtime", "--output", "json"]) == 0
    import json

    figures = json.loads(capsys.readouterr().out)["traces"]["runtime"]
    assert 0 < figures["runtime_mae_ratio_to_group_median"] < 1.5
    assert 0.5 < figures["runtime_p90_coverage"] <= 1
    assert figures["queue_wait_ratio_to_fcfs"] > 0 and figures["queue_gpus"] >= 1
    assert main(["optimize", "report", "--traces", "--quick", "--model", "runtime"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("runtime on the public traces (held out):") and "PAI v2020 simulator" in out
