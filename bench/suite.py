"""Benchmark of the test suite itself: `make check` and a warm `make test`, timed, with what the runs cost in
sleeps and control planes.

    .venv/bin/python bench/suite.py [--quick] [--test-workers N] [--check-workers N]

Runs `make check` (lint + every test needing no control plane, Go-built tool or image), then `make test`
(the whole suite; its builds are reused from the cache, so this is the warm figure). Each pytest process
appends what it counted to a ledger file (tests/harness/pytest_lanes.py: time.sleep calls by where they came
from, kube-apiservers started), added up here. `--quick` runs `make check` only.

Prints figures, then one JSON line with check_seconds, test_seconds_warm, control_planes_started,
sleep_seconds_total (every time.sleep in the test processes), split into sleep_seconds_polls (wait_for between
checks of a condition), sleep_seconds_tests (fixed sleeps of the tests and the harness, each at most 0.3 s)
and sleep_seconds_kgwe (KGWE's own loops running inside the tests), the passed/failed counts and the load
average at the start and end (figures on a shared machine are rough).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected)")


def run(target: str, ledger: Path, variables: dict[str, str]) -> dict[str, Any]:
    """`make <target>` with the ledger named; its wall time, outcome counts and exit code."""
    env = {**os.environ, "KGWE_SUITE_STATS": str(ledger)}
    argv = ["make", "--no-print-directory", target, *(f"{k}={v}" for k, v in variables.items())]
    print(f"$ {' '.join(argv)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    for line in proc.stdout.splitlines():
        if line.startswith(("FAILED ", "ERROR ")) or (_SUMMARY.search(line) and line.startswith("=")):
            print(f"  {line}", file=sys.stderr)
    counts: dict[str, int] = {}
    for line in reversed(proc.stdout.splitlines()):
        found = _SUMMARY.findall(line)
        if found and ("passed" in line or "failed" in line):
            counts = {("errors" if kind.startswith("error") else kind): int(n) for n, kind in found}
            break
    return {"seconds": round(seconds, 1), "exit": proc.returncode, **counts}


def ledger_totals(ledger: Path) -> dict[str, float]:
    """The ledger's lines added up (one per pytest process)."""
    sleeps = {"polls": 0.0, "tests": 0.0, "harness": 0.0, "kgwe": 0.0, "other": 0.0}
    planes = calls = 0
    if ledger.is_file():
        for line in ledger.read_text().splitlines():
            entry = json.loads(line)
            planes += int(entry["control_planes_started"])
            calls += int(entry["sleeps"])
            for origin, seconds in entry["sleep_seconds"].items():
                sleeps[origin] = sleeps.get(origin, 0.0) + float(seconds)
    return {
        "control_planes_started": planes,
        "sleeps": calls,
        "sleep_seconds_total": round(sum(sleeps.values()), 1),
        "sleep_seconds_polls": round(sleeps["polls"], 1),
        "sleep_seconds_tests": round(sleeps["tests"] + sleeps["harness"], 1),
        "sleep_seconds_kgwe": round(sleeps["kgwe"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="make check only")
    parser.add_argument("--test-workers", type=int, help="TEST_WORKERS for make test")
    parser.add_argument("--check-workers", type=int, help="CHECK_WORKERS for make check")
    args = parser.parse_args()
    load_start = os.getloadavg()
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kgwe-suite-") as tmp:
        check_ledger, test_ledger = Path(tmp) / "check.jsonl", Path(tmp) / "test.jsonl"
        check_vars = {"CHECK_WORKERS": str(args.check_workers)} if args.check_workers else {}
        check = run("check", check_ledger, check_vars)
        print(f"make check: {check}", file=sys.stderr)
        result["check_seconds"] = check["seconds"]
        result["check"] = check
        result["check_ledger"] = ledger_totals(check_ledger)
        if not args.quick:
            test_vars = {"TEST_WORKERS": str(args.test_workers)} if args.test_workers else {}
            test = run("test", test_ledger, test_vars)
            print(f"make test: {test}", file=sys.stderr)
            totals = ledger_totals(test_ledger)
            print(f"make test's processes: {totals}", file=sys.stderr)
            result.update({"test_seconds_warm": test["seconds"], "test": test, **totals})
    result["load_average_start_end"] = [round(load_start[0], 1), round(os.getloadavg()[0], 1)]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
