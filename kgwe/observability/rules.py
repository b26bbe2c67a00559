"""Where KGWE's alerting rules and their runbooks live, and how to read them (tests, the e2e Prometheus).

The rule file is a plain Prometheus rule file inside the Helm chart, which ships it as a PrometheusRule
(kube-prometheus) behind `monitoring.prometheusRule.enabled`; each alert's `runbook_url` points to a page
of docs/runbooks/ in the repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kgwe.resources import deploy_dir

RULES_FILE = deploy_dir() / "helm" / "kgwe" / "files" / "monitoring" / "kgwe-alerts.yaml"
RUNBOOK_BASE_URL = "https://github.com/kgwe/kgwe/blob/main/docs/runbooks/"
RUNBOOKS_DIR = Path(__file__).resolve().parents[2] / "docs" / "runbooks"


def rule_groups(path: Path = RULES_FILE) -> list[dict[str, Any]]:
    return list(yaml.safe_load(path.read_text(encoding="utf-8"))["groups"])


def alert_rules(path: Path = RULES_FILE) -> list[dict[str, Any]]:
    return [rule for group in rule_groups(path) for rule in group["rules"] if "alert" in rule]


def runbook_path(url: str) -> Path | None:
    """The docs/runbooks/ page a runbook_url names (None for a URL elsewhere)."""
    if not url.startswith(RUNBOOK_BASE_URL):
        return None
    return RUNBOOKS_DIR / url.removeprefix(RUNBOOK_BASE_URL)
