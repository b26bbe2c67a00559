"""The Grafana dashboards: generated from code (checked in, no drift), every query parsed by Prometheus's own
parser (promtool), every KGWE metric they read exported by KGWE, and shipped by the chart as ConfigMaps the
Grafana sidecar picks up."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from kgwe.observability import dashboards

KGWE_SOURCES = Path(dashboards.__file__).resolve().parents[1]
DEPLOY_MONITORING = dashboards.DASHBOARDS_DIR.parents[4] / "monitoring"


def test_checked_in_dashboards_match_the_generator():
    expected = dashboards.render_all()
    on_disk = {p.name: p.read_text() for p in dashboards.DASHBOARDS_DIR.glob("*.json")}
    assert on_disk == expected, "dashboards are stale: run `python -m kgwe.observability.dashboards`"


def test_the_four_dashboards_and_what_they_show():
    boards = {d[0]: dashboards.build(d) for d in dashboards.DASHBOARDS}
    assert set(boards) == {"kgwe-fleet", "kgwe-scheduling", "kgwe-rollout", "kgwe-cost"}
    for uid, board in boards.items():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), f"{uid}: panel ids repeat"
        assert board["templating"]["list"][0]["name"] == "datasource"
        for panel in board["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
    titles = " | ".join(p.title for d in dashboards.DASHBOARDS for p in dashboards.panels(d))
    for needed in (
        "Unhealthy GPUs",
        "MIG instances",
        "Shared GPU replicas",
        "latency p50 / p99",
        "Filter failure reasons",
        "Assumptions",
        "GPUWorkloads by phase",
        "gang wait",
        "Ready / Stalled",
        "Applied revision",
        "Rollout progress",
        "Commit-back",
        "Spend by team",
        "Savings from MIG",
        "Spend by namespace",
        "Budget burn",
        "Idle cost",
    ):
        assert needed in titles, needed


def _rules_file(exprs: list[str], path: Path) -> Path:
    rules = [{"record": f"kgwe:dashboard_query_{i}", "expr": e} for i, e in enumerate(exprs)]
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    return path


def test_promtool_parses_every_dashboard_query(promtool, tmp_path):
    exprs = [expr for _, expr, _ in dashboards.all_queries()]
    assert len(exprs) >= 30
    proc = promtool("check", "rules", str(_rules_file(exprs, tmp_path / "q.yaml")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = _rules_file([*exprs, "sum by (team (kgwe_gpu_cost)"], tmp_path / "broken.yaml")
    assert promtool("check", "rules", str(broken)).returncode != 0


def test_every_kgwe_metric_a_dashboard_reads_is_exported():
    source = "\n".join(
        p.read_text() for p in KGWE_SOURCES.rglob("*.py") if "observability/dashboards" not in str(p)
    )
    names = {m for _, expr, _ in dashboards.all_queries() for m in re.findall(r"\bkgwe_[a-z_]+", expr)}
    missing = sorted(n for n in names if f'"{re.sub(r"_(bucket|count|sum)$", "", n)}"' not in source)
    assert not missing, f"dashboards read metrics KGWE does not export: {missing}"


def test_the_chart_ships_each_dashboard_as_a_sidecar_configmap():
    docs = [d for d in yaml.safe_load_all((DEPLOY_MONITORING / "dashboards.yaml").read_text()) if d]
    assert {d["metadata"]["name"] for d in docs} == {f"{d[0]}-dashboard" for d in dashboards.DASHBOARDS}
    for doc in docs:
        assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((name, text),) = doc["data"].items()
        assert json.loads(text) == json.loads((dashboards.DASHBOARDS_DIR / name).read_text())
    rule = yaml.safe_load((DEPLOY_MONITORING / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule" and rule["spec"]["groups"]
