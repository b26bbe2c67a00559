"""The controller's cost duties: GPU metering, budget status and alerts, `Enforce` quota caps, the prices
GPUWorkloads are costed at, and the cost reports committed on the repository's schedule.

They see a PolicyRepository through plain data (RepositoryView: the policy in force, the spec, and what
they may do with it: Events, commit back), never through the reconciler. The quota caps are an input of the
reconcile's build step (`budget_caps`): the one apply path renders the capped `kgwe-budget` ResourceQuota in
the same pass that found the budget exhausted, and the cap never fights the render.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgwe.cost.budgets import BudgetSpec, BudgetStatus, alert_events, budget_from_policy, quota_decisions
from kgwe.cost.pricing import PriceBook, pricebook_from_catalog
from kgwe.cost.service import ADVICE_SECONDS, CostService
from kgwe.cost.usage import Period, month_period
from kgwe.errors import KgweError
from kgwe.gitops.commit_back import CommitBack, CommitResult
from kgwe.impact.record import demand_record_file
from kgwe.policy.cluster_kinds import PolicyRepositorySpec
from kgwe.policy.loader import PolicySet
from kgwe.quantity import count
from kgwe.reconcile import cron
from kgwe.timestamps import format_rfc3339, parse_rfc3339
from kgwe.vocab import is_gpu_resource

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from kgwe.optimizer.admission import BudgetRoom
    from kgwe.optimizer.runtime import RuntimeModel
    from kgwe.optimizer.service import OptimizerDuties
    from kgwe.planner.mig_demand import PoolView
    from kgwe.planner.rebalance import Outlook

log = logging.getLogger(__name__)

MAX_OUTLOOK_AGE = timedelta(days=1)  # an older MIG demand fit is no outlook (the refit has been failing)
QuotaCaps = dict[str, dict[str, str]]  # namespace -> ResourceQuota spec.hard of an enforced budget
Alert = Callable[[str, str, str], None]  # (event type Normal|Warning, reason, message) about the repository


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RepositoryView:
    """What the cost duties see of a PolicyRepository after a pass, and what they may do with it."""

    name: str
    obj: Mapping[str, Any]  # the PolicyRepository as read (Events are about it)
    policy: PolicySet | None  # of the last applied revision (None: nothing valid applied yet)
    spec: PolicyRepositorySpec | None  # as validated by the pass (None: the spec is invalid)
    record: Alert  # an Event about the repository
    commit_back: Callable[[PolicyRepositorySpec, str], CommitBack]  # (spec, work directory name)
    is_leader: Callable[[], bool]


def gpu_use_by_namespace(
    pods: Iterable[Mapping[str, Any]], namespaces: Iterable[str]
) -> dict[str, dict[str, int]]:
    """GPU resources (whole, shared, MIG) requested by the live pods of each namespace: a container's
    requests, else its limits."""
    use: dict[str, dict[str, int]] = {ns: {} for ns in namespaces}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        held = use.get(meta.get("namespace") or "")
        if held is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container in spec.get("containers") or []:
            resources = container.get("resources") or {}
            wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for name, value in wanted.items():
                if is_gpu_resource(name):
                    held[name] = held.get(name, 0) + count(value)
    return use


def budget_rooms(budgets: Sequence[BudgetSpec], statuses: Sequence[BudgetStatus]) -> dict[str, BudgetRoom]:
    """namespace -> what its budget has left this period and what it does with a workload that would
    overspend it (kgwe.optimizer.admission)."""
    from kgwe.optimizer.admission import BudgetRoom

    return {
        ns: BudgetRoom(b.name, s.remaining, s.currency, b.predicted_cost_admission)
        for b, s in zip(budgets, statuses, strict=True)
        for ns in b.namespaces
    }


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
    from kgwe.optimizer.report_insights import advise_pods
    from kgwe.optimizer.service import OptimizerDuties

    return CostDuties(
        CostService(
            store,
            cluster=cluster,
            spool_path=spool_path,
            prometheus_url=prometheus_url,
            advice_seconds=advice_seconds,
            advisor=advise_pods,  # the reports' predictions and workload classes (docs/optimizer-usage.md)
        ),
        prometheus_url=prometheus_url,
        refresh_seconds=refresh_seconds,
        optimizer=OptimizerDuties(store, prometheus_url=prometheus_url),
    )


class CostDuties:
    def __init__(
        self,
        service: CostService,
        *,
        prometheus_url: str | None = None,
        refresh_seconds: float = 60.0,
        now: Callable[[], datetime] = _utcnow,
        optimizer: OptimizerDuties | None = None,
    ) -> None:
        self.service = service
        self.optimizer = optimizer  # the models refitted on schedule, read at admission (None: off)
        self._rooms: dict[str, dict[str, BudgetRoom]] = {}  # repository -> namespace -> its budget's room
        self.prometheus_url = prometheus_url
        self.refresh_seconds = refresh_seconds
        self.now = now
        self._started = False
        self._last_refresh: dict[str, datetime] = {}
        self._caps: dict[str, QuotaCaps] = {}  # per repository, as decided at its last budget refresh
        self._last_report_check: dict[str, datetime] = {}
        self.book: PriceBook | None = None  # the prices GPUWorkloads are costed at
        self._runtime_cache: tuple[datetime, RuntimeModel | None] | None = None

    def workload_cost(self, namespace: str, name: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        """status.cost of a GPUWorkload: its pods' metered GPU-hours and cost since it was created."""
        from kgwe.policy.gpu_workload import GPUWorkload
        from kgwe.workloads.cost import pod_pattern, workload_cost

        if self.book is None:
            return None
        wl = GPUWorkload.model_validate(obj)
        now = self.now()
        created = obj["metadata"].get("creationTimestamp")
        since = parse_rfc3339(created) or now
        if since >= now:
            return None
        pattern = pod_pattern(name, [r.name for r in wl.spec.effective_roles()], wl.spec.is_batch)
        usage = self.service.store.usage(Period(since, now))
        hours, amount = workload_cost(usage, self.book, namespace, pattern, now)
        return {
            "gpuHours": str(hours),
            "amount": str(amount),
            "currency": self.book.currency,
            "asOf": format_rfc3339(now),
        }

    def start(self, api_client: ApiClient) -> None:
        """Start metering once (on first becoming leader); the watch reconciles with live pods on start."""
        if not self._started:
            self.service.start_metering(api_client)
            self._started = True

    def stop(self) -> None:
        """Stop metering (lease lost or shutdown); `start` starts it again on the next leadership."""
        self.service.stop()
        self._started = False

    def prices_in_force(self, policy: PolicySet) -> bool:
        """Cost GPUWorkloads at `policy`'s prices from now on (a policy in force without prices keeps the
        ones known); whether they changed."""
        catalog = policy.pricing_catalog()
        if catalog is None:
            return False
        book = pricebook_from_catalog(catalog)
        changed = self.book is None or book != self.book
        self.book = book
        return changed

    def budget_caps(
        self, repository: str, policy: PolicySet, pods: Sequence[Mapping[str, Any]], record: Alert
    ) -> QuotaCaps:
        """The `Enforce` quota caps for `policy`'s budgets, an input of the reconcile that applies it.

        Every `refresh_seconds` the budgets are evaluated again (metrics, alerts as Events through
        `record`), and each budget whose Enforce alert fired caps its namespaces at the GPUs the live
        `pods` hold; between refreshes the caps decided last hold. No prices: nothing is capped."""
        catalog = policy.pricing_catalog()
        if catalog is None:
            self._caps.pop(repository, None)
            self._rooms.pop(repository, None)
            return {}
        now = self.now()
        budgets = [budget_from_policy(b) for b in policy.budgets]
        last = self._last_refresh.get(repository)
        if last is None or (now - last).total_seconds() >= self.refresh_seconds:
            self._last_refresh[repository] = now
            statuses = self.service.refresh(pricebook_from_catalog(catalog), budgets, now)
            for status in statuses:
                for event_type, reason, message in alert_events(status):
                    record(event_type, reason, message)
            self._rooms[repository] = budget_rooms(budgets, statuses)
            use = gpu_use_by_namespace(pods, sorted({ns for b in budgets for ns in b.namespaces}))
            self._caps[repository] = {
                d.namespace: d.hard
                for budget, status in zip(budgets, statuses, strict=True)
                for d in quota_decisions(budget, status, use)
                if d.capped
            }
        return dict(self._caps.get(repository, {}))

    def after_reconcile(self, view: RepositoryView) -> None:
        """After a pass: the budget teams metering labels pods with, and the reports due on schedule."""
        if view.policy is None or view.policy.pricing_catalog() is None:
            return  # nothing valid applied yet, or no prices: nothing to meter against
        budgets = [budget_from_policy(b) for b in view.policy.budgets]
        self.service.budget_teams_by_repository[view.name] = {
            ns: b.team for b in budgets for ns in b.namespaces
        }
        self._reports(view, budgets, self.now())
        if self.optimizer is not None:
            self.optimizer.refit_due()

    # -- the optimizer at admission (decision 3): kgwe.workloads.controller calls these ---------------------
    def workload_admission(
        self, obj: Mapping[str, Any], now: datetime
    ) -> tuple[dict[str, Any] | None, tuple[str, str, str] | None]:
        """status.prediction of a GPUWorkload about to be admitted, and its budget's decision (None: admit).
        Never raises: a workload the optimizer cannot read is admitted as without it."""
        from kgwe.optimizer import admission

        try:
            shape = admission.shape_of(obj)
            duration = admission.predict(self._runtime_model(), shape)
            cost = admission.predict_cost(shape, duration, self.book) if self.book is not None else None
            room = next((r[shape.namespace] for r in self._rooms.values() if shape.namespace in r), None)
            return admission.prediction_status(duration, cost, now), admission.budget_decision(cost, room)
        except Exception:  # advice: its failure admits as today's rule would
            log.exception("prediction for a GPUWorkload failed; admitted without one")
            return None, None

    def workload_finished(self, obj: Mapping[str, Any], outcome: str, ended: datetime) -> None:
        """A GPUWorkload completed or failed: its run joins the runtime model's history (never raises)."""
        from kgwe.optimizer.admission import finished_run

        if self.optimizer is None:
            return
        try:
            run = finished_run(obj, outcome, ended)
        except Exception:
            log.exception("finished run not read")
            return
        if run is not None:
            self.optimizer.run_finished(run)

    def mig_outlooks(self, views: Sequence[PoolView]) -> dict[str, Outlook]:
        """The MIG demand each rebalancing pool should be ready for (kgwe.optimizer.demand), from the newest
        fit of the last week's metered demand; none without a fit, from a fit older than a day, or one this
        code cannot read — the pools then follow pending pods alone (today's rule)."""
        from kgwe.optimizer import demand

        record = self.optimizer.record(demand.NAME) if self.optimizer is not None else None
        if (
            record is None
            or record.version != demand.VERSION
            or self.now() - record.fitted_at > MAX_OUTLOOK_AGE
        ):
            return {}
        model = demand.DemandModel.from_params(record.params)
        if model is None:
            return {}
        return demand.pool_outlooks(model, [(v.name, v.profiles, v.held) for v in views])

    def _published_models(self, now: datetime) -> dict[str, str]:
        """The optimizer's newest models and the predictions section, committed with the cost reports."""
        from kgwe.optimizer.published import published_files

        return published_files(self.optimizer.records(), now) if self.optimizer is not None else {}

    def _runtime_model(self) -> RuntimeModel | None:
        """The newest runtime model (None: none fitted, or a record this code cannot read)."""
        from kgwe.optimizer.runtime import NAME, VERSION, RuntimeModel

        record = self.optimizer.record(NAME) if self.optimizer is not None else None
        if record is None or record.version != VERSION:
            return None
        cached = self._runtime_cache
        if cached is None or cached[0] != record.fitted_at:
            cached = (record.fitted_at, RuntimeModel.from_params(record.params))
            self._runtime_cache = cached
        return cached[1]

    def _reports(self, view: RepositoryView, budgets: list[BudgetSpec], now: datetime) -> None:
        if view.spec is None or view.spec.reports is None:
            return
        try:
            schedule = cron.parse(view.spec.reports.schedule)  # the model's default when the spec has none
        except KgweError as exc:
            view.record("Warning", "InvalidReportSchedule", str(exc))
            return
        last = self._last_report_check.setdefault(view.name, now)  # first sight: wait for the next fire
        if not schedule.fired_between(last, now):
            return
        self._last_report_check[view.name] = now
        self._commit_reports(view, budgets, now)

    def commit_reports_now(self, view: RepositoryView) -> CommitResult | None:
        """Commit the month's cost reports now, whatever the schedule (the demo's closing step); the
        CommitResult, or None when the repository has no valid policy, prices or spec.reports."""
        if view.policy is None or view.policy.pricing_catalog() is None:
            return None
        return self._commit_reports(view, [budget_from_policy(b) for b in view.policy.budgets], self.now())

    def _commit_reports(
        self, view: RepositoryView, budgets: list[BudgetSpec], now: datetime
    ) -> CommitResult | None:
        spec, catalog = view.spec, view.policy.pricing_catalog() if view.policy is not None else None
        if spec is None or spec.reports is None or catalog is None or not view.is_leader():
            return None  # the lease was lost meanwhile: the new leader commits
        try:
            commit_back = view.commit_back(spec, "cost-reports")
        except KgweError as exc:
            view.record("Warning", "CommitBackRejected", f"cost reports: {exc}")
            return None
        result = self.service.commit(
            pricebook_from_catalog(catalog),
            budgets,
            month_period(now),
            now,
            commit_back=commit_back,
            path_prefix=spec.reports_path,
            prometheus_url=self.prometheus_url,
            extra_files={
                **demand_record_file(self.service.store, now, self.service.cluster),
                **self._published_models(now),
            },
        )
        if result.status == "rejected":
            view.record("Warning", "CommitBackRejected", f"cost reports: {result.reason}")
        elif result.status == "pushed":
            view.record("Normal", "ReportsCommitted", f"cost reports committed as {(result.sha or '')[:12]}")
        else:
            log.info("cost reports for %s: %s", view.name, result.status)
        return result
