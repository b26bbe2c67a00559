"""The models committed beside the cost reports, and `kgwe submit --dry-run --policy` predicting a
workload's duration and cost from the committed runtime model."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from kgwe.cli import main
from kgwe.optimizer import runtime
from kgwe.optimizer.admission import WORKLOAD_LEVELS, shape_of
from kgwe.optimizer.published import published_files, read_published
from kgwe.optimizer.record import MAX_RECORD_BYTES, ModelRecord, ModelRecordError
from kgwe.resources import sample_repo_dir, workload_examples_dir

NOW = datetime(2026, 5, 8, tzinfo=UTC)


def runtime_record(workload: dict, hours: float, runs: int) -> ModelRecord:
    keys = shape_of(workload).keys()
    model = runtime.fit([runtime.Example(keys, hours * 3600)] * runs, WORKLOAD_LEVELS)
    return ModelRecord(
        runtime.NAME,
        runtime.VERSION,
        NOW,
        NOW - timedelta(days=90),
        NOW,
        runs,
        {"p90_coverage": 0.9},
        model.to_params(),
        ("a note",),
    )


def readme() -> dict:
    return yaml.safe_load((workload_examples_dir() / "kgwe-readme-llm-training.yaml").read_text())


def test_the_predictions_section_lists_every_model_and_the_records_are_committed_whole():
    record = runtime_record(readme(), 2, 12)
    files = published_files({"runtime": record}, NOW)
    assert ModelRecord.from_json(files["reports/models/runtime.json"]) == record
    report = files["reports/predictions.md"]
    assert (
        "| runtime | a GPUWorkload's duration quantiles" in report and "| 12 | p90_coverage 0.9 |" in report
    )
    assert "| mig-demand |" in report and "| not yet |" in report
    assert "- runtime: a note" in report


def test_a_committed_model_is_found_beside_the_policy_folder_and_refused_when_odd(tmp_path):
    assert read_published(tmp_path / "policy", "runtime") is None
    folder = tmp_path / "reports" / "models"
    folder.mkdir(parents=True)
    record = runtime_record(readme(), 2, 3)
    (folder / "runtime.json").write_text(record.to_json().decode())
    assert read_published(tmp_path / "policy", "runtime") == record  # the policy folder's parent
    (folder / "runtime.json").write_bytes(b" " * (MAX_RECORD_BYTES + 1))
    with pytest.raises(ModelRecordError, match="over"):
        read_published(tmp_path, "runtime")
    (folder / "runtime.json").unlink()
    (folder / "runtime.json").symlink_to("/etc/passwd")
    with pytest.raises(ModelRecordError, match="symlink"):
        read_published(tmp_path, "runtime")


def test_submit_dry_run_prints_the_expected_cost_and_its_p90(tmp_path, capsys):
    repo = tmp_path / "repo"
    shutil.copytree(sample_repo_dir(), repo)
    doc = readme()
    doc["metadata"]["namespace"] = "ml-training"
    doc["spec"]["gpuRequirements"]["product"] = "NVIDIA-A100-SXM4-80GB"
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(doc))
    args = ["submit", "--dry-run=client", "--policy", str(repo), str(tmp_path / "wl.yaml")]
    assert main(args) == 0
    prior = capsys.readouterr().out.splitlines()[1]
    assert "no finished run recorded yet: the prior from public job runtimes" in prior

    models = repo / "reports" / "models"
    models.mkdir(parents=True)
    (models / "runtime.json").write_text(runtime_record(doc, 2, 40).to_json().decode())
    assert main(args) == 0
    line = capsys.readouterr().out.splitlines()[1]
    # 8 A100s at 2.45 for about 2 h: ~39 USD; 40 runs of exactly 2 h leave no spread
    assert line.startswith("  gpuworkload.kgwe.nvidia.io/llm-training: expected 2.0 h (P90 2.0 h), cost 3")
    assert "USD (P90 3" in line
    assert line.endswith(
        "from 40 finished runs of workload type Training in ml-training shaped 1 x whole:8 (of 40 in all)"
    )
