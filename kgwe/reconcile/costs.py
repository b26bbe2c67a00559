"""The controller's cost duties, run by the leader after each reconcile of a PolicyRepository: GPU metering,
budget status and alerts, `Enforce` quota caps, and the cost reports committed on the repository's schedule.

The quota cap is not applied here: it is handed to the RepositoryReconciler as an override of the rendered
`kgwe-budget` ResourceQuota, so the one apply path owns that object and the cap never fights the render.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from kgwe.cluster.names import is_gpu_resource
from kgwe.cost.budgets import budget_from_policy, quota_decisions
from kgwe.cost.pricing import pricebook_from_catalog
from kgwe.cost.service import ADVICE_SECONDS, CostService
from kgwe.cost.usage import Period, month_period
from kgwe.errors import KgweError
from kgwe.reconcile import cron

log = logging.getLogger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def gpu_use_by_namespace(api_client: client.ApiClient, namespaces: list[str]) -> dict[str, dict[str, int]]:
    """GPU resources (whole, shared, MIG) requested by the live pods of each namespace."""
    core = client.CoreV1Api(api_client)
    use: dict[str, dict[str, int]] = {}
    for ns in namespaces:
        held = use.setdefault(ns, {})
        for pod in core.list_namespaced_pod(ns).items:
            if (pod.status.phase or "") in ("Succeeded", "Failed"):
                continue
            for container in pod.spec.containers:
                resources = container.resources
                requests = {
                    **((resources.limits if resources else None) or {}),
                    **((resources.requests if resources else None) or {}),
                }
                for name, value in requests.items():
                    if is_gpu_resource(name):
                        held[name] = held.get(name, 0) + int(value)
    return use


def cost_duties(
    db: str,
    *,
    cluster: str,
    prometheus_url: str | None = None,
    spool_path: Path | None = None,
    refresh_seconds: float = 60.0,
    advice_seconds: float = ADVICE_SECONDS,
) -> CostDuties:
    """The cost duties `kgwe controller` runs, on the store at `db` (SQLite path or postgresql:// URL).

    A database outage must not keep the controller down: a failed migration is retried by metering, and
    intervals wait in the spool at `spool_path` until the store accepts them."""
    from kgwe.cost.store import CostStore

    store = CostStore(db)
    try:
        store.migrate()
    except KgweError as exc:
        log.warning("%s; metering will retry the migration", exc)
    return CostDuties(
        CostService(
            store,
            cluster=cluster,
            spool_path=spool_path,
            prometheus_url=prometheus_url,
            advice_seconds=advice_seconds,
        ),
        prometheus_url=prometheus_url,
        refresh_seconds=refresh_seconds,
    )


class CostDuties:
    def __init__(
        self,
        service: CostService,
        *,
        prometheus_url: str | None = None,
        refresh_seconds: float = 60.0,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.service = service
        self.prometheus_url = prometheus_url
        self.refresh_seconds = refresh_seconds
        self.now = now
        self._started = False
        self._last_refresh: dict[str, datetime] = {}
        self._last_report_check: dict[str, datetime] = {}
        self.book: Any = None

    def workload_cost(self, namespace: str, name: str, obj: dict) -> dict | None:
        """status.cost of a GPUWorkload: its pods' metered GPU-hours and cost since it was created."""
        from kgwe.policy.gpu_workload import GPUWorkload
        from kgwe.workloads.cost import pod_pattern, workload_cost
        from kgwe.workloads.status import rfc3339

        if self.book is None:
            return None
        wl = GPUWorkload.model_validate(obj)
        now = self.now()
        created = obj["metadata"].get("creationTimestamp")
        since = datetime.fromisoformat(created.replace("Z", "+00:00")) if created else now
        if since >= now:
            return None
        pattern = pod_pattern(name, [r.name for r in wl.spec.effective_roles()], wl.spec.is_batch)
        usage = self.service.store.usage(Period(since, now))
        hours, amount = workload_cost(usage, self.book, namespace, pattern, now)
        return {
            "gpuHours": str(hours),
            "amount": str(amount),
            "currency": self.book.currency,
            "asOf": rfc3339(now),
        }

    def start(self, api_client: client.ApiClient) -> None:
        """Start metering once (on first becoming leader); the watch reconciles with live pods on start."""
        if not self._started:
            self.service.start_metering(api_client)
            self._started = True

    def stop(self) -> None:
        """Stop metering (lease lost or shutdown); `start` starts it again on the next leadership."""
        self.service.stop()
        self._started = False

    def after_reconcile(self, rec: Any, repo: dict) -> None:
        ps = getattr(rec, "last_policy", None)
        if ps is None or ps.pricing_catalog() is None:
            return  # nothing valid applied yet, or no prices: nothing to meter against
        name, now = rec.name, self.now()
        book = pricebook_from_catalog(ps.pricing_catalog())
        self.book = book  # the GPUWorkload reconciler prices its workloads' usage with it
        budgets = [budget_from_policy(b) for b in ps.budgets]
        self.service.budget_teams_by_repository[name] = {ns: b.team for b in budgets for ns in b.namespaces}
        last = self._last_refresh.get(name)
        if last is None or (now - last).total_seconds() >= self.refresh_seconds:
            self._last_refresh[name] = now
            statuses = self.service.refresh(book, budgets, now)
            self.service.emit_alerts(rec.recorder, repo, statuses)
            namespaces = sorted({ns for b in budgets for ns in b.namespaces})
            use = gpu_use_by_namespace(rec.api_client, namespaces)
            rec.quota_overrides = {
                d.namespace: d.hard
                for budget, status in zip(budgets, statuses, strict=True)
                for d in quota_decisions(budget, status, use)
                if d.capped
            }
        self._reports(rec, repo, book, budgets, now)

    def _reports(self, rec: Any, repo: dict, book: Any, budgets: list, now: datetime) -> None:
        typed = rec.last_spec  # validated by this pass's reconcile (None: the spec is invalid)
        if typed is None or typed.reports is None:
            return
        try:
            schedule = cron.parse(typed.reports.schedule)  # the model's default when the spec has none
        except KgweError as exc:
            rec.recorder.warning(repo, "InvalidReportSchedule", str(exc))
            return
        last = self._last_report_check.setdefault(rec.name, now)  # first sight: wait for the next fire
        if not schedule.fired_between(last, now):
            return
        self._last_report_check[rec.name] = now
        self._commit_reports(rec, repo, book, budgets, now)

    def commit_reports_now(self, rec: Any, repo: dict) -> Any:
        """Commit the month's cost reports now, whatever the schedule (the demo's closing step); the
        CommitResult, or None when the repository has no valid policy, prices or spec.reports."""
        ps = getattr(rec, "last_policy", None)
        if (
            ps is None
            or ps.pricing_catalog() is None
            or rec.last_spec is None
            or rec.last_spec.reports is None
        ):
            return None
        book = pricebook_from_catalog(ps.pricing_catalog())
        return self._commit_reports(rec, repo, book, [budget_from_policy(b) for b in ps.budgets], self.now())

    def _commit_reports(self, rec: Any, repo: dict, book: Any, budgets: list, now: datetime) -> Any:
        typed = rec.last_spec
        if not rec.is_leader():
            return None  # the lease was lost meanwhile: the new leader commits
        try:
            commit_back = rec.commit_back(typed, "cost-reports")
        except KgweError as exc:
            rec.recorder.warning(repo, "CommitBackRejected", f"cost reports: {exc}")
            return None
        result = self.service.commit(
            book,
            budgets,
            month_period(now),
            now,
            commit_back=commit_back,
            path_prefix=typed.reports_path,
            prometheus_url=self.prometheus_url,
        )
        if result.status == "rejected":
            rec.recorder.warning(repo, "CommitBackRejected", f"cost reports: {result.reason}")
        elif result.status == "pushed":
            rec.recorder.normal(repo, "ReportsCommitted", f"cost reports committed as {result.sha[:12]}")
        else:
            log.info("cost reports for %s: %s", rec.name, result.status)
        return result
