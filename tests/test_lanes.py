"""The suite's own rules (tests/harness/pytest_lanes.py), run on small test files in a pytest of their own: a
test that runs what its marks leave out fails naming the fixture to take, a long fixed sleep fails, the
marks come from fixtures, and the ledger counts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def run(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """pytest in a process of its own with the lanes plugin, a cache folder holding a fake Go-built tool."""
    cache = tmp_path / "cache"
    tool = cache / "helm-v0.0.0" / "helm"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    monkeypatch.setenv("KGWE_CACHE_DIR", str(cache))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("KGWE_SUITE_STATS", str(tmp_path / "ledger.jsonl"))

    def go(source: str, *args: str) -> pytest.RunResult:
        pytester.makepyfile(test_subject=source.replace("TOOL", repr(str(tool))))
        return pytester.runpytest_subprocess(
            "-p", "tests.harness.pytest_lanes", "-p", "no:cacheprovider", *args
        )

    go.ledger = tmp_path / "ledger.jsonl"  # type: ignore[attr-defined]
    return go


def test_running_a_go_tool_without_its_mark_fails_naming_the_fixtures(run) -> None:
    result = run("import subprocess\ndef test_it():\n    subprocess.run([TOOL], check=True)\n")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*runs helm but is not marked `gotool`*chart, dpconfig, flux*"])


def test_the_mark_lets_it_run_and_keeps_it_out_of_the_fast_lane(run) -> None:
    source = (
        "import subprocess, pytest\n@pytest.mark.gotool\n"
        "def test_it():\n    subprocess.run([TOOL], check=True)\n"
    )
    run(source).assert_outcomes(passed=1)
    run(source, "-m", "not gotool").assert_outcomes(deselected=1)


def test_a_swallowed_refusal_still_fails_the_test(run) -> None:
    source = (
        "import contextlib, subprocess\ndef test_it():\n"
        "    with contextlib.suppress(Exception):\n        subprocess.run([TOOL])\n"
    )
    run(source).assert_outcomes(failed=1)


def test_a_fixed_sleep_longer_than_the_limit_fails_and_a_short_one_passes(run) -> None:
    result = run(
        "import time\ndef test_long():\n    time.sleep(0.5)\ndef test_short():\n    time.sleep(0.05)\n"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_subject.py:3 sleeps 0.5 s, longer than 0.3 s*wait_for*"])


def test_marks_come_from_the_fixtures_a_test_takes(run) -> None:
    source = (
        "import pytest\n@pytest.fixture\ndef control_plane():\n    return None\n"
        "def test_uses_it(control_plane):\n    pass\ndef test_plain():\n    pass\n"
    )
    run(source, "-m", "cluster").assert_outcomes(passed=1, deselected=1)


def test_the_ledger_counts_sleeps_by_origin(run) -> None:
    run("import time\ndef test_it():\n    time.sleep(0.2)\n").assert_outcomes(passed=1)
    (entry,) = [json.loads(line) for line in run.ledger.read_text().splitlines()]
    assert entry["sleeps"] >= 1 and entry["sleep_seconds"]["tests"] >= 0.2
    assert entry["control_planes_started"] == 0 and entry["worker"] == "main"
