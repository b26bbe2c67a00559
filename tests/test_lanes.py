"""The suite's own rules (tests/harness/pytest_lanes.py), run on a small test file in a pytest of its own: a
test that runs what its marks leave out fails naming the fixture to take (also when it swallows the
refusal), a long fixed sleep fails, the marks come from fixtures, and the ledger counts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]

SUBJECT = """
import contextlib, subprocess, time
import pytest

@pytest.fixture
def control_plane():
    return None

def test_unmarked_tool():
    subprocess.run([TOOL], check=True)

@pytest.mark.gotool
def test_marked_tool():
    subprocess.run([TOOL], check=True)

def test_swallowed_refusal():
    with contextlib.suppress(Exception):
        subprocess.run([TOOL])

def test_long_sleep():
    time.sleep(0.5)

def test_short_sleep():
    time.sleep(0.2)

def test_takes_the_plane(control_plane):
    pass
"""


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
    pytester.makepyfile(test_subject=SUBJECT.replace("TOOL", repr(str(tool))))

    def go(*args: str) -> pytest.RunResult:
        plugins = ("-p", "tests.harness.pytest_lanes", "-p", "no:cacheprovider")
        return pytester.runpytest_subprocess(*plugins, *args)

    go.ledger = tmp_path / "ledger.jsonl"  # type: ignore[attr-defined]
    return go


def test_the_rules_on_a_test_file(run) -> None:
    result = run("-rA")
    outcomes = {
        line.split("::")[1].split()[0]: line.split()[0]
        for line in result.stdout.lines
        if line.startswith(("PASSED ", "FAILED ")) and "::" in line
    }
    assert outcomes == {
        "test_unmarked_tool": "FAILED",
        "test_marked_tool": "PASSED",
        "test_swallowed_refusal": "FAILED",
        "test_long_sleep": "FAILED",
        "test_short_sleep": "PASSED",
        "test_takes_the_plane": "PASSED",
    }
    result.stdout.fnmatch_lines(["*runs helm but is not marked `gotool`*chart, dpconfig, flux*"])
    result.stdout.fnmatch_lines(["*test_subject.py:* sleeps 0.5 s, longer than 0.3 s*wait_for*"])
    (entry,) = [json.loads(line) for line in run.ledger.read_text().splitlines()]
    assert entry["sleep_seconds"]["tests"] >= 0.7 and entry["control_planes_started"] == 0


def test_marks_from_fixtures_select_the_lanes(run) -> None:
    # the marked tool test and the control plane's test are left out; the unmarked tool test runs and fails
    run("-m", "not (cluster or gotool)", "-k", "tool or plane").assert_outcomes(failed=1, deselected=5)
