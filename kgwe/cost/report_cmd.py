"""kgwe report: chargeback, budget status, forecast, rightsizing and the advice (spot candidates, cost
efficiency, cost per completed run) from the cost store.

Dates are UTC: `--since 2026-11-01 --until 2026-12-01` is November. Prices and budgets come from
the policy repository (`--policy`, its PricingCatalog and GPUBudgets); the GPUWorkloads for the spot advice
and the run costs from `--workloads FILE` (`kubectl get gpuworkloads -A -o yaml`). Files land under
OUT/reports/<cluster>/<period>/; with `--commit-back URL` they are also committed to that repository.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgwe.cost.advice import Advice
from kgwe.cost.budgets import BudgetSpec, budget_from_policy
from kgwe.cost.efficiency import DCGM, PER
from kgwe.cost.insights import Advisor
from kgwe.cost.pricing import pricebook_from_catalog
from kgwe.cost.reports import write_reports
from kgwe.cost.service import generate_reports
from kgwe.cost.store import CostStore, normalize_url
from kgwe.cost.usage import Period
from kgwe.errors import KgweError
from kgwe.policy.pricing import PricingCatalog
from kgwe.timestamps import parse_rfc3339

if TYPE_CHECKING:
    from kgwe.policy.pricing import PricingCatalog

MAX_WORKLOADS_BYTES = 64 << 20  # a `kubectl get gpuworkloads -A -o yaml` of some thousands of workloads


def parse_utc(text: str, what: str) -> datetime:
    value = parse_rfc3339(text)
    if value is None:
        example = "e.g. 2026-11-01 or 2026-11-01T06:00Z"
        raise KgweError(f"{what}: {text!r} is not a date or ISO time ({example})")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", required=True, help="start of the period (UTC date or ISO time)")
    parser.add_argument("--until", required=True, help="end of the period, exclusive")
    parser.add_argument("--db", default=None, help="cost database URL or SQLite path (default kgwe-cost.db)")
    parser.add_argument("--policy", default=".", help="policy repository with the PricingCatalog and budgets")
    parser.add_argument("--cluster", default="default", help="cluster name used in the report path")
    parser.add_argument(
        "--prometheus", default=None, help="Prometheus URL for rightsizing and efficiency (DCGM)"
    )
    parser.add_argument(
        "--workloads",
        default=None,
        metavar="FILE",
        help="GPUWorkloads for spot advice and cost per run (`kubectl get gpuworkloads -A -o yaml`)",
    )
    parser.add_argument("--now", default=None, help="evaluate as of (default: now, ≤ --until)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--commit-back", default=None, metavar="REPO_URL", help="also commit reports there")
    parser.add_argument("--branch", default="main", help="branch for --commit-back")


def _policy(path: str) -> tuple[PricingCatalog, list[BudgetSpec]]:
    from kgwe.policy.loader import load_repository
    from kgwe.policy.pricing import PricingCatalog

    policy = load_repository(path)
    if not policy.ok:
        first = "; ".join(str(d) for d in policy.errors[:3])
        raise KgweError(f"policy repository {path} has errors: {first}")
    catalogs = policy.objects(PricingCatalog)
    if not catalogs:
        raise KgweError(f"no PricingCatalog in {path}: reports need prices")
    if len(catalogs) > 1:
        named = [c for c in catalogs if c.metadata.name == "default"]
        if len(named) != 1:
            raise KgweError(f"{path} has {len(catalogs)} PricingCatalogs; name the one to use 'default'")
        catalogs = named
    return catalogs[0], [budget_from_policy(b) for b in policy.budgets]


def read_workloads(path: str) -> list[dict[str, Any]]:
    """The GPUWorkloads of a YAML file: a `List` (as kubectl prints it) or GPUWorkload documents."""
    from kgwe.policy.yaml_source import YamlSyntaxError, parse_documents

    file = Path(path)
    if not file.is_file():
        raise KgweError(f"--workloads {path}: no such file")
    if file.stat().st_size > MAX_WORKLOADS_BYTES:
        raise KgweError(f"--workloads {path}: larger than {MAX_WORKLOADS_BYTES} bytes")
    try:
        docs = [d.data for d in parse_documents(file.read_text(encoding="utf-8")) if d.data is not None]
    except YamlSyntaxError as exc:
        raise KgweError(f"{path}:{exc.line}:{exc.column}: not YAML: {exc}") from None
    except UnicodeDecodeError:
        raise KgweError(f"--workloads {path}: not UTF-8 text") from None
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        items = (
            doc.get("items") if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") else [doc]
        )
        for item in items if isinstance(items, list) else [None]:
            if not isinstance(item, dict) or item.get("kind") != "GPUWorkload":
                kind = item.get("kind") if isinstance(item, dict) else type(item).__name__
                raise KgweError(
                    f"{path}: document {i + 1} holds a {kind}, not a GPUWorkload (or a List of them)"
                )
            out.append(item)
    return out


def run(args: argparse.Namespace, advisor: Advisor | None = None) -> int:
    """`advisor`: the workload optimizer's rightsizing, predictions and classes (`kgwe report` passes it:
    kgwe.optimizer.report_cmd); None keeps today's rule."""
    period = Period(parse_utc(args.since, "--since"), parse_utc(args.until, "--until"))
    now = min(parse_utc(args.now, "--now") if args.now else datetime.now(UTC), period.until)
    catalog, budgets = _policy(args.policy)
    book = pricebook_from_catalog(catalog)
    url = normalize_url(args.db)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
        path = url[len("sqlite:///") :]
        raise KgweError(f"no cost database at {path} (metering has not recorded anything there yet)")
    store = CostStore(url)
    store.migrate()

    workloads = read_workloads(args.workloads) if args.workloads else None
    generated = generate_reports(
        store, book, budgets, period, now, args.cluster, args.prometheus, workloads, advisor
    )
    files, cb = generated.files, generated.chargeback
    out = Path(args.out)
    written = write_reports(files, out)
    print(
        f"cluster GPU cost {cb.cluster_cost} {cb.currency} = allocated {cb.allocated_cost} + idle "
        f"{cb.idle_cost_total} ({period.label})"
    )
    for line in advice_summary(generated.advice):
        print(line)
    for w in (*cb.warnings, *generated.advice.warnings):
        print(f"warning: {w}")
    print(f"wrote {len(written)} files under {out / 'reports' / args.cluster / period.label}")
    if args.commit_back:
        from kgwe.gitops.report_commit import commit_reports  # git only when asked to commit

        result = commit_reports(
            files,
            args.commit_back,
            args.branch,
            out / ".commit-back",
            summary=f"cost reports {args.cluster} {period.label}",
            allow_local=True,  # the person running this command names their own repository
        )
        print(f"commit-back: {result.status} {result.sha or ''} {result.reason}".rstrip())
        if result.status in ("rejected", "failed"):
            return 1
    return 0


def advice_summary(advice: Advice) -> list[str]:
    """Three lines for the terminal: spot, efficiency, runs (the reports have the tables)."""
    currency = advice.currency
    if advice.workloads_read:
        movable = [a for a in advice.spot if a.movable]
        total = sum((a.saving_per_month for a in movable), Decimal("0.00"))
        spot = (
            f"spot: {len(movable)} GPUWorkload(s) could move, saving {total} {currency}/month "
            f"(assuming {advice.spot_assumption})"
        )
        runs = ", ".join(f"{t.team} {t.runs} at {t.mean_cost} {currency} mean" for t in advice.team_runs)
        runs_line = f"completed runs: {runs or 'none this period'}"
    else:
        spot = "spot: no GPUWorkloads read (--workloads FILE)"
        runs_line = "completed runs: no GPUWorkloads read (--workloads FILE)"
    scores = ", ".join(
        f"{e.subject} {e.score if e.score is not None else '-'}"
        + ("" if e.basis == DCGM else f" ({e.basis})")
        for e in advice.team_efficiency
    )
    return [spot, f"efficiency, busy GPU-h per {PER} {currency}: {scores or 'no usage'}", runs_line]
