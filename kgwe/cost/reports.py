"""Cost reports: chargeback, budgets, forecast, rightsizing, the metered GPU inventory, and the advice (spot
candidates, cost efficiency, cost per completed run), as Markdown, CSV and YAML rendered from Jinja2 templates
(templates/reports/), under reports/<cluster>/<period>/.

`build_reports` is pure (data in, {relative path: text} out), one small function per report; `write_reports`
writes a folder, and kgwe.gitops.report_commit commits the same files to the policy repository.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import jinja2

from kgwe import vocab
from kgwe.cost.advice import Advice
from kgwe.cost.budgets import BudgetSpec, BudgetStatus, complete_days, evaluate_budget
from kgwe.cost.chargeback import IDLE_KEY, Chargeback
from kgwe.cost.efficiency import PER
from kgwe.cost.forecast import forecast_daily
from kgwe.cost.insights import Insights, PodClass, PodPrediction
from kgwe.cost.rightsizing import Recommendation
from kgwe.cost.usage import NodeCapacity, Period
from kgwe.errors import KgweError
from kgwe.resources import templates_dir
from kgwe.safetext import csv_cell, escape, markdown_cell
from kgwe.vocab import DEFAULT_MIG_PRICING, DEFAULT_REPORTS_PATH

FORECAST_NOTE = (
    "outage days cleaned; mean of SES, last-7-day mean and weekly Holt-Winters (≥ 14 days of "
    "history); shorter histories fall back to SES + mean or the mean"
)
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class _Written(str):
    """Text a report filter has already made safe for its format (the finalizer leaves it as it is)."""


def _csv_row(values: Sequence[Any]) -> _Written:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([csv_cell(v) for v in values])
    return _Written(buf.getvalue())


def _md(value: object) -> _Written:
    """Table-safe Markdown: pipes and control characters (a lone CR ends the row) escaped."""
    return _Written(markdown_cell(value))


def _yaml(value: object) -> _Written:
    return _Written(json.dumps(str(value)))  # JSON strings are valid YAML scalars


# What every `{{ ... }}` of a template of each format becomes unless a filter made it safe already: the
# team a committer typed, a reason, a URL can never reach a report raw, whichever template forgets a filter.
_FINALIZE: dict[str, Callable[[str], str]] = {"md": markdown_cell, "csv": csv_cell, "yaml": escape}
FORMATS = tuple(_FINALIZE)


def environment(fmt: str) -> jinja2.Environment:
    """The templates of one format (`md`, `csv`, `yaml`), each output neutralised for it (kgwe.safetext)."""
    neutralise = _FINALIZE[fmt]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir() / "reports")),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=lambda value: value if isinstance(value, _Written) else neutralise(str(value)),
    )
    env.filters.update(csv=_csv_row, md=_md, yaml=_yaml)
    env.globals["idle_key"] = IDLE_KEY
    env.globals["vocab"] = vocab  # names on the cluster (the inventory snapshot's apiVersion and labels)
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
    mig_pricing: str = DEFAULT_MIG_PRICING
    forecast_days: int = 7
    advice: Advice | None = None  # spot, efficiency and run costs (None: no GPUWorkloads were read)
    insights: Insights = field(default_factory=Insights)  # the optimizer's predictions and classes


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


Files = dict[str, str]  # relative path -> text


@dataclass(frozen=True)
class _Part:
    """What every report part gets: the input, the template environment, where its files go, and the
    header fields every report shows."""

    data: ReportInput
    envs: Mapping[str, jinja2.Environment]  # per format
    base: str
    common: dict[str, Any]

    def render(self, name: str, ctx: Mapping[str, Any]) -> Files:
        """`<name>.md` and `<name>.csv` from their templates."""
        return {
            f"{self.base}/{name}.{ext}": self.envs[ext]
            .get_template(f"{name}.{ext}.j2")
            .render({**self.common, **ctx})
            for ext in ("md", "csv")
        }


def build_reports(data: ReportInput) -> Files:
    """Every report file of the period (pure: the same input renders the same bytes)."""
    cb = data.by_team_namespace_product_daily
    if cb.group_by != ("team", "namespace", "gpu_product") or cb.granularity != "day":
        raise KgweError("reports need a daily chargeback grouped by team, namespace and gpu_product")
    cluster, period = segment(data.cluster, "cluster name"), segment(data.period.label, "period label")
    part = _Part(
        data,
        {fmt: environment(fmt) for fmt in FORMATS},
        f"{DEFAULT_REPORTS_PATH}/{cluster}/{period}",
        {"cluster": data.cluster, "period": data.period, "currency": cb.currency, "now": data.now},
    )
    files: Files = {}
    for build in (
        _chargeback,
        _budgets,
        _forecast,
        _rightsizing,
        _predictions,
        _inventory,
        _spot,
        _efficiency,
        _runs,
    ):
        files.update(build(part))
    return files


def _chargeback(part: _Part) -> Files:
    """Cost by team, namespace and GPU product, idle apart, and the daily lines as CSV."""
    cb = part.data.by_team_namespace_product_daily
    total = cb.cluster_cost
    return part.render(
        "chargeback",
        {
            "mig_pricing": part.data.mig_pricing,
            "idle_cost": cb.idle_cost,
            "by_team": [
                {
                    "name": r["key"][0],
                    "cost": r["cost"],
                    "gpu_hours": r["gpu_hours"],
                    "share": _pct(r["cost"], total),
                }
                for r in _rollup(cb, ["team"])
            ],
            "by_namespace": [
                {
                    "namespace": r["key"][1],
                    "team": r["key"][0],
                    "cost": r["cost"],
                    "gpu_hours": r["gpu_hours"],
                }
                for r in _rollup(cb, ["team", "namespace"])
            ],
            "by_product": [
                {"name": r["key"][0], "cost": r["cost"], "gpu_hours": r["gpu_hours"]}
                for r in _rollup(cb, ["gpu_product"])
            ],
            "idle_total": str(cb.idle_cost_total),
            "idle_gpu_hours": sum((i.gpu_hours for i in cb.idle), Decimal(0)),
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
        },
    )


def _budgets(part: _Part) -> Files:
    """Each GPUBudget's spend, burn rate, forecast and the alerts fired."""
    data = part.data
    statuses = [
        evaluate_budget(spec, data.daily_spend_history.get(spec.team, {}), data.now) for spec in data.budgets
    ]
    rows = [_budget_row(spec, st) for spec, st in zip(data.budgets, statuses, strict=True)]
    return part.render("budgets", {"forecast_note": FORECAST_NOTE, "budgets": rows})


def _forecast(part: _Part) -> Files:
    """Each team's spend per day over the forecast horizon."""
    data = part.data
    today = data.now.date()
    forecasts = []
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
    ctx = {"forecasts": forecasts, "horizon_days": data.forecast_days, "forecast_note": FORECAST_NOTE}
    return part.render("forecast", ctx)


def _rightsizing(part: _Part) -> Files:
    """Pods whose measured (or, before a week of history, predicted) use fits a smaller (or needs a larger)
    GPU allocation, with the class their telemetry shows."""
    data = part.data
    classes = data.insights.classes
    return part.render(
        "rightsizing",
        {
            "source": data.rightsizing_source,
            "skipped": data.rightsizing_skipped,
            "recommendations": [_rec_row(r, classes.get((r.namespace, r.pod))) for r in data.recommendations],
        },
    )


def _predictions(part: _Part) -> Files:
    """The optimizer's predictions: each pod's later GPU use (P50, P90) and from what, and its class."""
    data = part.data
    classes = sorted(data.insights.classes.values(), key=lambda c: (c.name, c.namespace, c.pod))
    return part.render(
        "pod-predictions",
        {
            "source": data.rightsizing_source,
            "predictions": [_prediction_row(p) for p in data.insights.predictions],
            "classes": classes,
            "notes": data.insights.notes,
        },
    )


def _prediction_row(p: PodPrediction) -> dict[str, Any]:
    return {
        "namespace": p.namespace,
        "pod": p.pod,
        "memory_p50_mib": f"{p.memory_p50_mib:.0f}",
        "memory_p90_mib": f"{p.memory_p90_mib:.0f}",
        "compute_p50": f"{p.compute_p50_gpus:.3f}",
        "compute_p90": f"{p.compute_p90_gpus:.3f}",
        "basis": "fallback" if p.fallback else "model",
        "why": p.fallback or p.reason,
    }


def _inventory(part: _Part) -> Files:
    """The GPU nodes metered in the period, as a GPUInventory `kgwe plan` can read."""
    latest: dict[str, NodeCapacity] = {}
    for n in sorted(part.data.nodes, key=lambda n: n.start):
        latest[n.node] = n
    nodes = [
        {"name": n.node, "product": n.gpu_product, "gpus": n.gpu_count, "spot": n.spot}
        for _, n in sorted(latest.items())
        if n.gpu_count > 0
    ]
    text = part.envs["yaml"].get_template("inventory.yaml.j2").render(**part.common, nodes=nodes)
    return {f"{part.base}/inventory.yaml": text}


def _spot(part: _Part) -> Files:
    """GPUWorkloads that could run on spot capacity, the saving, and the interruption assumption."""
    advice = part.data.advice
    return part.render(
        "spot",
        {
            "known": advice is not None and advice.workloads_read,
            "assumption": advice.spot_assumption if advice else "",
            "movable": [a for a in advice.spot if a.movable] if advice else [],
            "kept": [a for a in advice.spot if not a.movable] if advice else [],
            "total_per_month": sum((a.saving_per_month for a in advice.spot if a.movable), Decimal("0.00"))
            if advice
            else Decimal("0.00"),
        },
    )


def _efficiency(part: _Part) -> Files:
    """Busy GPU-hours per 100 of the currency, per team and per GPUWorkload; and the pods holding GPUs idle
    (notebooks first), from the optimizer's classes."""
    advice = part.data.advice
    return part.render(
        "efficiency",
        {
            "known": advice is not None,
            "workloads_read": advice is not None and advice.workloads_read,
            "source": advice.activity_source if advice else "",
            "per": PER,
            "teams": list(advice.team_efficiency) if advice else [],
            "workloads": list(advice.workload_efficiency) if advice else [],
            "warnings": list(advice.warnings) if advice else [],
            "classed": bool(part.data.insights.classes),
            "idle_holders": _idle_holders(part.data),
        },
    )


def _idle_holders(data: ReportInput) -> list[dict[str, Any]]:
    """Pods classed idle holders with what they held in the period: declared notebooks first, then by cost."""
    usage = data.advice.pod_usage if data.advice else {}
    rows = []
    for (namespace, pod), c in data.insights.classes.items():
        if c.name != vocab.WORKLOAD_CLASS_IDLE:
            continue
        hours, cost = usage.get((namespace, pod), (None, None))
        notebook = c.declared == vocab.WORKLOAD_CLASS_INTERACTIVE
        rows.append(
            {
                "namespace": namespace,
                "pod": pod,
                "declared": c.declared or "",
                "notebook": notebook,
                "gpu_hours": hours,
                "cost": cost,
                "reason": c.reason,
            }
        )
    return sorted(rows, key=lambda r: (not r["notebook"], -(r["cost"] or 0), r["namespace"], r["pod"]))


def _runs(part: _Part) -> Files:
    """What each GPUWorkload that completed in the period cost, all attempts included; per team, the mean."""
    advice = part.data.advice
    return part.render(
        "runs",
        {
            "known": advice is not None and advice.workloads_read,
            "runs": list(advice.runs) if advice else [],
            "teams": list(advice.team_runs) if advice else [],
        },
    )


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


def _rec_row(r: Recommendation, cls: PodClass | None = None) -> dict[str, Any]:
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
        "need_memory_mib": f"{r.need_memory_mib:.0f}",
        "need_compute": f"{r.need_compute_gpus:.3f}",
        "confidence": f"{r.confidence:.2f}",
        "idle": r.idle,
        "downsizable": r.downsizable,
        "undersized": r.undersized,
        "basis": r.basis,
        "why": r.reason,
        "workload_class": cls.name if cls is not None else "",
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
