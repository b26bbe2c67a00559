"""A real Prometheus (built from github.com/prometheus/prometheus) in the loop: `kgwe demo --prometheus` runs
the controller, the extender, the MIG manager and device-plugin stand-ins, GPUWorkloads and metering on the
real control plane with Prometheus scraping KGWE's /metrics every second; every dashboard panel must return
data, and the alerts the demo provokes (a node's MIG manager reports failed, a GPU turns unhealthy, the
extender stops) must fire (the shipped rules evaluated every second, their `for:` windows dropped)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kgwe.observability.dashboards import DASHBOARDS, panels

# `kgwe demo --prometheus` starts its own control plane and a Prometheus built here first
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("prometheus")]


def test_every_panel_has_data_and_provoked_alerts_hold(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kgwe.cli", "demo", "--prometheus"],
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
