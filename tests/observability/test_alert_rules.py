"""KGWE's alerting rules on Prometheus's own code: `promtool check rules` on the rule file the chart ships,
`promtool test rules` unit tests with a firing case for every alert, and the mixin conventions every
alert keeps (name, severity, summary, description, a runbook page that exists)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from kgwe.observability.rules import RULES_FILE, RUNBOOKS_DIR, alert_rules, runbook_path

UNIT_TESTS = Path(__file__).parent / "rules" / "kgwe-alerts.test.yaml"


def test_promtool_check_rules_accepts_the_rule_file(promtool):
    proc = promtool("check", "rules", str(RULES_FILE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_promtool_check_rules_rejects_a_broken_expression(promtool, tmp_path):
    broken = RULES_FILE.read_text().replace("absent(up{", "absent(up{{", 1)
    (tmp_path / "r.yaml").write_text(broken)
    proc = promtool("check", "rules", str(tmp_path / "r.yaml"))
    assert proc.returncode != 0


def _run_unit_tests(promtool, tmp_path: Path, rules_text: str):
    (tmp_path / "kgwe-alerts.yaml").write_text(rules_text)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)


def test_promtool_unit_tests_pass(promtool, tmp_path):
    proc = _run_unit_tests(promtool, tmp_path, RULES_FILE.read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_unit_tests_catch_a_changed_threshold(promtool, tmp_path):
    changed = RULES_FILE.read_text().replace("> 1800", "> 3600", 1)
    proc = _run_unit_tests(promtool, tmp_path, changed)
    assert proc.returncode != 0 and "KGWEGangWaitingTooLong" in proc.stdout + proc.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test():
    doc = yaml.safe_load(UNIT_TESTS.read_text())
    firing, quiet = set(), set()
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names - firing == set(), "alerts without a firing unit test"
    assert names - quiet == set(), "alerts without a quiet unit test"
    assert firing | quiet <= names, "unit tests of unknown alerts"
    print(f"\nalerts with unit tests: {len(names & firing & quiet)}/{len(names)}")


def test_every_alert_follows_the_mixin_conventions_and_has_a_runbook():
    rules = alert_rules()
    assert len(rules) >= 15
    for rule in rules:
        name = rule["alert"]
        assert name.startswith("KGWE") and name.isalnum(), name
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        notes = rule["annotations"]
        assert notes["summary"].endswith("."), name
        assert "{{" not in notes["summary"], f"{name}: summary must be static"
        assert notes["description"], name
        page = runbook_path(notes["runbook_url"])
        assert page == RUNBOOKS_DIR / f"{name.lower()}.md" and page.is_file(), name
        assert page.read_text().startswith(f"# {name}\n"), name
    pages = {p.name for p in RUNBOOKS_DIR.glob("kgwe*.md")}
    assert pages == {f"{r['alert'].lower()}.md" for r in rules}, "a runbook page without its alert"
