"""Cost reports: chargeback, budgets, forecast, rightsizing and the metered GPU inventory, as Markdown,
CSV and YAML rendered from Jinja2 templates (templates/reports/), under reports/<cluster>/<period>/.

`build_reports` is pure (data in, {relative path: text} out); `write_reports` writes a folder, and
kgwe.gitops.report_commit commits the same files to the policy repository.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import jinja2

from kgwe.cost.budgets import BudgetSpec, BudgetStatus, complete_days, evaluate_budget
from kgwe.cost.chargeback import IDLE_KEY, Chargeback
from kgwe.cost.forecast import forecast_daily
from kgwe.cost.rightsizing import Recommendation
from kgwe.cost.usage import NodeCapacity, Period
from kgwe.errors import KgweError
from kgwe.resources import templates_dir

FORECAST_NOTE = (
    "outage days cleaned; mean of SES, last-7-day mean and weekly Holt-Winters (≥ 14 days of "
    "history); shorter histories fall back to SES + mean or the mean"
)
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _csv_row(values: Sequence[Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(["" if v is None else str(v) for v in values])
    return buf.getvalue()


def _md(value: Any) -> str:
    """Table-safe Markdown: pipes and newlines would break the row."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def _yaml(value: Any) -> str:
    return json.dumps(str(value))  # JSON strings are valid YAML scalars


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir() / "reports")),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(csv=_csv_row, md=_md, yaml=_yaml)
    env.globals["idle_key"] = IDLE_KEY
    return env


@dataclass(frozen=True)
class ReportInput:
    cluster: str
    now: datetime
    period: Period
    by_team_namespace_product_daily: Chargeback  # granularity "day", group_by team, namespace, gpu_product
    nodes: Sequence[NodeCapacity]
    budgets: Sequence[BudgetSpec] = ()
    daily_spend_history: Mapping[str, Mapping[date, Decimal]] = field(default_factory=dict)  # team->day->cost
    recommendations: Sequence[Recommendation] = ()
    rightsizing_source: str = ""
    rightsizing_skipped: int = 0
    mig_pricing: str = "ComputeSlices"
    forecast_days: int = 7


def _pct(part: Decimal, whole: Decimal) -> str:
    return f"{(part / whole * 100):.1f}%" if whole else "0.0%"


def _rollup(cb: Chargeback, dims: Sequence[str]) -> list[dict[str, Any]]:
    idx = [cb.group_by.index(d) for d in dims]
    cost: dict[tuple[str, ...], Decimal] = defaultdict(Decimal)
    hours: dict[tuple[str, ...], Decimal] = defaultdict(Decimal)
    for line in cb.lines:
        key = tuple(line.key[i] for i in idx)
        cost[key] += line.cost
        hours[key] += line.gpu_hours
    return [{"key": k, "cost": cost[k], "gpu_hours": hours[k]} for k in sorted(cost)]


def segment(text: str, what: str) -> str:
    """A path segment we are willing to write: no separators, no dot-dot."""
    if not _SAFE_SEGMENT.match(text) or ".." in text:
        raise KgweError(f"{what} {text!r} is not usable in a report path (letters, digits, . _ - only)")
    return text


def build_reports(data: ReportInput) -> dict[str, str]:
    cb = data.by_team_namespace_product_daily
    if cb.group_by != ("team", "namespace", "gpu_product") or cb.granularity != "day":
        raise KgweError("reports need a daily chargeback grouped by team, namespace and gpu_product")
    env = environment()
    base = f"reports/{segment(data.cluster, 'cluster name')}/{segment(data.period.label, 'period label')}"
    total = cb.cluster_cost
    idle_hours = sum((i.gpu_hours for i in cb.idle), Decimal(0))
    common = {"cluster": data.cluster, "period": data.period, "currency": cb.currency, "now": data.now}
    teams = _rollup(cb, ["team"])
    ctx = {
        **common,
        "mig_pricing": data.mig_pricing,
        "idle_cost": cb.idle_cost,
        "by_team": [
            {
                "name": r["key"][0],
                "cost": r["cost"],
                "gpu_hours": r["gpu_hours"],
                "share": _pct(r["cost"], total),
            }
            for r in teams
        ],
        "by_namespace": [
            {"namespace": r["key"][1], "team": r["key"][0], "cost": r["cost"], "gpu_hours": r["gpu_hours"]}
            for r in _rollup(cb, ["team", "namespace"])
        ],
        "by_product": [
            {"name": r["key"][0], "cost": r["cost"], "gpu_hours": r["gpu_hours"]}
            for r in _rollup(cb, ["gpu_product"])
        ],
        "idle_total": str(cb.idle_cost_total),
        "idle_gpu_hours": idle_hours,
        "idle_share": _pct(cb.idle_cost_total, total),
        "cluster_cost": total,
        "cluster_gpu_hours": cb.cluster_gpu_hours,
        "warnings": cb.warnings,
        "daily": [
            {
                "day": ln.bucket,
                "team": ln.key[0],
                "namespace": ln.key[1],
                "gpu_product": ln.key[2],
                "gpu_hours": ln.gpu_hours,
                "cost": ln.cost,
            }
            for ln in cb.lines
        ],
        "daily_idle": [{"day": i.bucket, "gpu_hours": i.gpu_hours, "cost": i.cost} for i in cb.idle],
    }
    files = {
        f"{base}/chargeback.md": env.get_template("chargeback.md.j2").render(ctx),
        f"{base}/chargeback.csv": env.get_template("chargeback.csv.j2").render(ctx),
    }

    statuses = [
        evaluate_budget(spec, data.daily_spend_history.get(spec.team, {}), data.now) for spec in data.budgets
    ]
    budget_ctx = {
        **common,
        "forecast_note": FORECAST_NOTE,
        "budgets": [_budget_row(spec, st) for spec, st in zip(data.budgets, statuses, strict=True)],
    }
    files[f"{base}/budgets.md"] = env.get_template("budgets.md.j2").render(budget_ctx)
    files[f"{base}/budgets.csv"] = env.get_template("budgets.csv.j2").render(budget_ctx)

    forecasts = []
    today = data.now.date()
    for team, history in sorted(data.daily_spend_history.items()):
        if not history:
            continue
        values = complete_days(history, today)
        fc = forecast_daily(values, data.forecast_days)
        per_day = [Decimal(repr(v)).quantize(Decimal("0.01")) for v in fc.values]
        forecasts.append(
            {
                "team": team,
                "days": len(values),
                "method": fc.method,
                "total": sum(per_day, Decimal(0)),
                "per_day": [str(v) for v in per_day],
                "by_day": [((today + timedelta(days=i)).isoformat(), v) for i, v in enumerate(per_day)],
            }
        )
    forecast_ctx = {
        **common,
        "forecasts": forecasts,
        "horizon_days": data.forecast_days,
        "forecast_note": FORECAST_NOTE,
    }
    files[f"{base}/forecast.md"] = env.get_template("forecast.md.j2").render(forecast_ctx)
    files[f"{base}/forecast.csv"] = env.get_template("forecast.csv.j2").render(forecast_ctx)

    rs_ctx = {
        **common,
        "source": data.rightsizing_source,
        "skipped": data.rightsizing_skipped,
        "recommendations": [_rec_row(r) for r in data.recommendations],
    }
    files[f"{base}/rightsizing.md"] = env.get_template("rightsizing.md.j2").render(rs_ctx)
    files[f"{base}/rightsizing.csv"] = env.get_template("rightsizing.csv.j2").render(rs_ctx)

    latest: dict[str, NodeCapacity] = {}
    for n in sorted(data.nodes, key=lambda n: n.start):
        latest[n.node] = n
    inv_nodes = [
        {"name": n.node, "product": n.gpu_product, "gpus": n.gpu_count, "spot": n.spot}
        for _, n in sorted(latest.items())
        if n.gpu_count > 0
    ]
    files[f"{base}/inventory.yaml"] = env.get_template("inventory.yaml.j2").render(**common, nodes=inv_nodes)
    return files


def _budget_row(spec: BudgetSpec, st: BudgetStatus) -> dict[str, Any]:
    return {
        "name": spec.name,
        "team": spec.team,
        "period": st.period.label,
        "spent": st.spent,
        "limit": st.limit,
        "used": f"{st.used_ratio * 100:.1f}%",
        "used_ratio": st.used_ratio,
        "burn": st.burn_rate_per_day,
        "forecast": st.forecast_end,
        "over": st.forecast_over_limit,
        "method": st.forecast_method,
        "fired": ", ".join(f"{a.at_percent}% {a.action}" for a in st.fired) or "none",
        "enforced": st.enforce,
        "quota": "capped at current use" if st.enforce else "normal",
        "currency": st.currency,
    }


def _rec_row(r: Recommendation) -> dict[str, Any]:
    notes = []
    if r.idle:
        notes.append("idle GPU")
    if r.downsizable:
        notes.append("downsize")
    if r.undersized:
        notes.append("undersized")
    if r.sharing_advice:
        notes.append(r.sharing_advice)
    if r.low_confidence:
        notes.append("low confidence (< 1 day)")
    return {
        "namespace": r.namespace,
        "pod": r.pod,
        "product": r.gpu_product,
        "current": r.current.label,
        "recommended": r.recommended.label,
        "p95_memory_mib": f"{r.p95_memory_mib:.0f}",
        "p90_compute": f"{r.p90_compute_gpus:.3f}",
        "confidence": f"{r.confidence:.2f}",
        "idle": r.idle,
        "downsizable": r.downsizable,
        "undersized": r.undersized,
        "note": ", ".join(notes) or "ok",
    }


def write_reports(files: Mapping[str, str], out_dir: Path) -> list[Path]:
    written = []
    for rel, text in sorted(files.items()):
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
