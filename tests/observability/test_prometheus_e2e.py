"""A real Prometheus (built from github.com/prometheus/prometheus) in the loop: `kgwe demo --prometheus` runs
the controller, the extender, the MIG manager and device-plugin stand-ins, GPUWorkloads and metering on the
real control plane with Prometheus scraping KGWE's /metrics every second; every dashboard panel must return
data, and the alerts the demo provokes (a node's MIG manager reports failed, a GPU turns unhealthy, the
extender stops) must fire (the shipped rules evaluated every second, their `for:` windows dropped). With
`--keep-repo` the demo leaves its policy repository behind, with the reports the controller committed."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

from kgwe.observability.dashboards import DASHBOARDS, panels

# `kgwe demo --prometheus` starts its own control plane and a Prometheus built here first
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("prometheus")]


def test_every_panel_has_data_and_provoked_alerts_hold(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kgwe.cli", "demo", "--prometheus", "--keep-repo", str(tmp_path / "kept")],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith('{"alerts_provoked"'))
    result = json.loads(line)
    non_dcgm = sum(1 for d in DASHBOARDS for p in panels(d) if not p.dcgm)
    assert result["panels"] == non_dcgm
    assert result["missing"] == [] and result["panels_with_data"] == non_dcgm, result["missing"]
    assert result["alerts_provoked"] == {
        "KGWEMIGConfigFailed": True,
        "KGWEGPUUnhealthy": True,
        "KGWEExtenderDown": True,
    }

    # the kept repository: the platform engineer's commits and the bot's, the reports a person reads
    kept = tmp_path / "kept"
    log = subprocess.run(["git", "-C", str(kept), "log", "--format=%an %s"], capture_output=True, text=True)
    authors = [line.split(" ", 1)[0] for line in log.stdout.splitlines()]
    assert "kgwe-bot" in authors and "Platform" in authors, log.stdout
    assert subprocess.run(["git", "-C", str(kept), "remote"], capture_output=True, text=True).stdout == ""
    (month,) = [p for p in (kept / "reports" / "prod" / "demo").iterdir() if p.is_dir()]  # cluster "demo"
    spot = list(csv.DictReader(io.StringIO((month / "spot.csv").read_text())))
    assert any(r["movable"] == "True" for r in spot), spot
    (run,) = list(csv.DictReader(io.StringIO((month / "runs.csv").read_text())))
    assert (run["workload"], run["attempts"]) == ("eval-nightly", "1") and float(run["cost"]) >= 0
    assert f"policy repository kept in {kept}" in proc.stdout
