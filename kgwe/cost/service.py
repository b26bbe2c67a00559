"""The cost engine as the controller runs it: metering in a thread, metrics refresh, and reports on a
schedule committed back to the policy repository. `kgwe report` uses `generate_reports` too.

Everything here is wiring: the decisions live in the pure modules.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgwe.cost.advice import POD_GROUP, Advice, advise, runs_since
from kgwe.cost.budgets import (
    BudgetSpec,
    BudgetStatus,
    budget_period,
    daily_spend_by_team,
    evaluate_budget,
)
from kgwe.cost.chargeback import Chargeback, compute_chargeback, mig_savings
from kgwe.cost.insights import Advisor, HeldPod, Insights, rule_only
from kgwe.cost.metrics import CostCollector, install
from kgwe.cost.pricing import PriceBook
from kgwe.cost.reports import ReportInput, build_reports
from kgwe.cost.rightsizing import size_of
from kgwe.cost.store import CostStore
from kgwe.cost.usage import WHOLE, Period, month_period
from kgwe.cost.workload_facts import PodKey, WorkloadFacts, facts_from_objects, pods_by_workload
from kgwe.errors import KgweError
from kgwe.vocab import DEFAULT_REPORTS_PATH

if TYPE_CHECKING:  # the Kubernetes client and Git are loaded only when metering or committing runs
    from kubernetes.client import ApiClient

    from kgwe.gitops.commit_back import CommitBack, CommitResult

log = logging.getLogger(__name__)

HISTORY_DAYS = 56  # forecast history: eight weeks, enough for weekly seasonality
ADVICE_SECONDS = 600.0  # how often the controller recomputes the advice metrics (a month of usage per pod)


@dataclass(frozen=True)
class Generated:
    files: dict[str, str]
    chargeback: Chargeback
    budgets: tuple[BudgetStatus, ...]
    advice: Advice


def daily_history(
    store: CostStore, book: PriceBook, now: datetime, since: datetime | None = None
) -> dict[str, dict[date, Decimal]]:
    """Spend per team per UTC day over the forecast history window ending at `now`."""
    start = (
        (now - timedelta(days=HISTORY_DAYS))
        if since is None
        else min(since, now - timedelta(days=HISTORY_DAYS))
    )
    start = start.replace(hour=0, minute=0, second=0, microsecond=0)
    window = Period(start, max(now, start + timedelta(seconds=1)))
    return daily_spend_by_team(
        store.chargeback(book, window, now=now, granularity="day", group_by=("team",)).lines
    )


def held_pods(
    store: CostStore, period: Period, book: PriceBook | None, facts: Sequence[WorkloadFacts] = ()
) -> dict[PodKey, HeldPod]:
    """The pods metered in the period as the rightsizing sees them: what each holds (its latest interval),
    its price, and its GPUWorkload with the declared workloadType when it belongs to one."""
    latest = {(iv.namespace, iv.pod): iv for iv in sorted(store.usage(period), key=lambda iv: iv.start)}
    owners: dict[PodKey, WorkloadFacts] = {}
    by_name = {(w.namespace, w.name): w for w in facts}
    for key, members in pods_by_workload(facts, latest).items():
        for pod, _run in members:
            owners[pod] = by_name[key]
    out = {}
    for key, iv in latest.items():
        price = book.price(iv.gpu_product) if book is not None else None
        owner = owners.get(key)
        out[key] = HeldPod(
            iv.namespace,
            iv.pod,
            iv.gpu_product,
            size_of(iv.gpu_product, iv.kind, iv.count, iv.mig_profile, iv.gpu_milli),
            iv.count if iv.kind == WHOLE else 1,
            price.per_hour(iv.spot) if price is not None else None,
            book.currency if book is not None else "",
            owner.name if owner else None,
            owner.workload_type if owner else None,
        )
    return out


def rightsizing(
    store: CostStore,
    period: Period,
    now: datetime,
    prometheus_url: str,
    book: PriceBook | None = None,
    facts: Sequence[WorkloadFacts] = (),
    advisor: Advisor | None = None,
) -> tuple[Insights, int]:
    """Rightsizing of the metered pods from their DCGM series: by `advisor` (the optimizer: predictions
    and classes too) or today's rule; and how many points or series Prometheus gave as garbage."""
    from kgwe.cost.prometheus import PrometheusClient

    series, skipped = PrometheusClient(prometheus_url).pod_utilization(period.since, now)
    held = held_pods(store, period, book, facts)
    if advisor is not None:
        try:
            return advisor(series, held), skipped
        except Exception as exc:  # the optimizer is advice: its failure leaves today's rule, never no report
            log.exception("workload optimizer failed on the reports' pods; today's rightsizing rule instead")
            found = rule_only(series, held)
            note = (
                f"the workload optimizer failed ({type(exc).__name__}: {exc}): today's rule sized every pod"
            )
            return replace(found, notes=(note,)), skipped
    return rule_only(series, held), skipped


def advice(
    store: CostStore,
    book: PriceBook,
    period: Period,
    now: datetime,
    workloads: Sequence[Mapping[str, Any]] | None,
    prometheus_url: str | None = None,
) -> Advice:
    """The period's advice from the store, the GPUWorkloads (None: not read) and, when a Prometheus is
    known, DCGM activity per pod; a Prometheus that fails leaves efficiency on allocation only, with a
    warning, rather than no report."""
    facts, warnings = facts_from_objects(workloads or ())
    end = min(now, period.until)
    activity = None
    if prometheus_url:
        from kgwe.cost.prometheus import PrometheusClient

        try:
            activity = PrometheusClient(prometheus_url).pod_engine_activity(period.since, end)
        except KgweError as exc:
            warnings.append(f"no DCGM activity ({exc}): efficiency on allocation only")
    usage = store.usage_aggregates(period, "total", POD_GROUP, now)
    since = runs_since(facts, period)
    run_usage = (
        store.usage_aggregates(Period(since, period.until), "total", POD_GROUP, now)
        if since < period.since
        else None
    )
    return advise(
        usage,
        facts,
        book,
        period,
        now,
        activity=activity,
        activity_source=prometheus_url or "",
        run_usage=run_usage,
        warnings=warnings,
        workloads_read=workloads is not None,
    )


def generate_reports(
    store: CostStore,
    book: PriceBook,
    budgets: Sequence[BudgetSpec],
    period: Period,
    now: datetime,
    cluster: str,
    prometheus_url: str | None = None,
    workloads: Sequence[Mapping[str, Any]] | None = None,
    advisor: Advisor | None = None,
) -> Generated:
    """The period's report files; `advisor` (the workload optimizer) adds predictions and classes to the
    rightsizing and efficiency reports (None: today's rule, nothing predicted)."""
    cb = store.chargeback(
        book, period, now=now, granularity="day", group_by=("team", "namespace", "gpu_product")
    )
    history = daily_history(store, book, now, period.since)
    facts, _ = facts_from_objects(workloads or ())
    found_insights, skipped = (
        rightsizing(store, period, now, prometheus_url, book, facts, advisor)
        if prometheus_url
        else (Insights(), 0)
    )
    found = advice(store, book, period, now, workloads, prometheus_url)
    files = build_reports(
        ReportInput(
            cluster=cluster,
            now=now,
            period=period,
            by_team_namespace_product_daily=cb,
            nodes=store.nodes(period),
            budgets=budgets,
            daily_spend_history=history,
            recommendations=found_insights.recommendations,
            insights=found_insights,
            rightsizing_source=prometheus_url or "",
            rightsizing_skipped=skipped,
            mig_pricing=book.mig_pricing,
            advice=found,
        )
    )
    statuses = tuple(evaluate_budget(b, history.get(b.team, {}), now) for b in budgets)
    return Generated(files, cb, statuses, found)


class CostService:
    """What the controller starts: `start_metering`, then periodically `refresh` (metrics, budget status
    for Enforce) and, on the PolicyRepository's reports schedule, `commit` (reports to Git)."""

    def __init__(
        self,
        store: CostStore,
        *,
        cluster: str,
        collector: CostCollector | None = None,
        spool_path: Path | None = None,
        prometheus_url: str | None = None,
        advice_seconds: float = ADVICE_SECONDS,
        advisor: Advisor | None = None,
    ) -> None:
        self.store = store
        self.advisor = advisor  # the optimizer's rightsizing, predictions and classes (None: the rule)
        self.spool_path = spool_path  # where metering keeps writes while the store is down
        self.cluster = cluster
        self.collector = collector or install()
        self.prometheus_url = prometheus_url  # DCGM activity for the efficiency metrics
        self.advice_seconds = advice_seconds
        self._advised_at: datetime | None = None
        # the cluster's GPUWorkloads, once metering runs (spot advice and run costs need them)
        self.workloads: Callable[[], list[dict[str, Any]]] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # namespace -> team of the GPUBudget claiming it, per PolicyRepository (set after each reconcile)
        self.budget_teams_by_repository: dict[str, dict[str, str]] = {}

    def budget_teams(self) -> dict[str, str]:
        merged: dict[str, str] = {}
        for _, teams in sorted(self.budget_teams_by_repository.items()):
            merged.update(teams)
        return merged

    def start_metering(self, api_client: ApiClient) -> None:
        from kgwe.cluster.client import list_gpu_workloads
        from kgwe.cost.metering_watch import MeteringWatch
        from kgwe.cost.spool import Spool

        self.workloads = lambda: list_gpu_workloads(api_client)
        spool = Spool(self.spool_path) if self.spool_path is not None else None
        self._stop = threading.Event()
        self.watch = MeteringWatch(api_client, self.store, budget_teams=self.budget_teams, spool=spool)
        self.collector.spool = self.watch.spool
        self._thread = threading.Thread(
            target=self.watch.run, args=(self._stop,), name="kgwe-metering", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def refresh(
        self, book: PriceBook, budgets: Sequence[BudgetSpec], now: datetime
    ) -> tuple[BudgetStatus, ...]:
        """Month-to-date chargeback into metrics; budget statuses (for alerts and Enforce quotas)."""
        month = month_period(now)
        usage = self.store.usage_aggregates(month, "total", ("team", "namespace"), now)
        capacity = self.store.capacity_aggregates(month, "total", now)
        cb = compute_chargeback(usage, capacity, book, month, "total", ("team", "namespace"))
        earliest = min((budget_period(b.period, now).since for b in budgets), default=month.since)
        history = daily_history(self.store, book, now, earliest)
        statuses = tuple(evaluate_budget(b, history.get(b.team, {}), now) for b in budgets)
        self.collector.update(cb, statuses, mig_savings=mig_savings(usage, book))
        if self._advised_at is None or (now - self._advised_at).total_seconds() >= self.advice_seconds:
            self._advised_at = now
            self.collector.update_advice(
                advice(self.store, book, month, now, self._read_workloads(), self.prometheus_url)
            )
        return statuses

    def _read_workloads(self) -> list[dict[str, Any]] | None:
        """The cluster's GPUWorkloads; None (advice without them) before metering runs or when the read
        fails, which must not stop metrics or reports."""
        if self.workloads is None:
            return None
        try:
            return self.workloads()
        except Exception as exc:  # an API error of any kind: the advice goes without workloads this time
            log.warning("reading GPUWorkloads for the cost advice failed: %s", exc)
            return None

    def commit(
        self,
        book: PriceBook,
        budgets: Sequence[BudgetSpec],
        period: Period,
        now: datetime,
        *,
        commit_back: CommitBack,
        path_prefix: str = DEFAULT_REPORTS_PATH,
        prometheus_url: str | None = None,
        extra_files: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Generate the period's reports and commit them, with `extra_files` (paths under the reports path,
        e.g. the demand record), through `commit_back` (a kgwe.gitops CommitBack that may write only under
        `path_prefix`)."""
        generated = generate_reports(
            self.store,
            book,
            budgets,
            period,
            now,
            self.cluster,
            prometheus_url,
            self._read_workloads(),
            self.advisor,
        )
        files = {**generated.files, **(extra_files or {})}
        if path_prefix != DEFAULT_REPORTS_PATH:  # PolicyRepository.spec.reports.path, e.g. reports/prod
            files = {
                path_prefix.rstrip("/") + rel[len(DEFAULT_REPORTS_PATH) :]: text
                for rel, text in files.items()
            }
        return commit_back.commit_files(files, summary=f"cost reports {self.cluster} {period.label}")
