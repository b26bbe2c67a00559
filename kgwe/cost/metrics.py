"""Prometheus metrics of the cost engine, from the latest chargeback and budget evaluation.

A custom collector serves a snapshot, so a team or namespace that disappears from the chargeback
disappears from the metrics too (labelled Gauges would keep stale series forever). Money is exported
as a float because that is all Prometheus has; the exact Decimal figures live in the reports.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Iterable, Sequence
from decimal import Decimal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from kgwe.cost.advice import Advice
from kgwe.cost.budgets import BudgetStatus
from kgwe.cost.chargeback import Chargeback
from kgwe.cost.spool import Spool


class CostCollector(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chargeback: Chargeback | None = None
        self._budgets: tuple[BudgetStatus, ...] = ()
        self.spool: Spool | None = None  # the metering spool once metering runs
        self._refreshed_at: float | None = None  # Unix time of the last update (metering-behind alert)
        self._mig_savings: Decimal | None = None
        self._advice: Advice | None = None

    def update(
        self,
        chargeback: Chargeback | None,
        budgets: Sequence[BudgetStatus] = (),
        mig_savings: Decimal | None = None,
    ) -> None:
        """`chargeback` must be grouped by team and namespace (any granularity: buckets are summed);
        `mig_savings` is what the period's MIG usage would have cost more on whole GPUs."""
        with self._lock:
            self._chargeback = chargeback
            self._mig_savings = mig_savings
            self._budgets = tuple(budgets)
            self._refreshed_at = time.time()

    def update_advice(self, advice: Advice) -> None:
        """The month's spot advice, cost efficiency and run costs (kgwe.cost.advice)."""
        with self._lock:
            self._advice = advice

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        with self._lock:
            cb, budgets, refreshed_at = self._chargeback, self._budgets, self._refreshed_at
            savings, advice = self._mig_savings, self._advice
        if advice is not None:
            yield from advice_metrics(advice)
        if refreshed_at is not None:
            yield GaugeMetricFamily(
                "kgwe_cost_refresh_timestamp_seconds",
                "When chargeback and budgets were last computed from the cost store",
                value=refreshed_at,
            )
        cost = GaugeMetricFamily(
            "kgwe_gpu_cost",
            "GPU cost in the current period by team and namespace",
            labels=["team", "namespace", "currency", "period"],
        )
        idle = GaugeMetricFamily(
            "kgwe_idle_gpu_cost",
            "Cost of GPU capacity nobody held this period",
            labels=["currency", "period"],
        )
        cluster = GaugeMetricFamily(
            "kgwe_cluster_gpu_cost", "Cluster GPU cost in the current period", labels=["currency", "period"]
        )
        if cb is not None:
            t, n = cb.group_by.index("team"), cb.group_by.index("namespace")
            sums: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
            for line in cb.lines:
                sums[(line.key[t], line.key[n])] += line.cost
            for (team, ns), value in sorted(sums.items()):
                cost.add_metric([team, ns, cb.currency, cb.period.label], float(value))
            idle.add_metric([cb.currency, cb.period.label], float(cb.idle_cost_total))
            cluster.add_metric([cb.currency, cb.period.label], float(cb.cluster_cost))
            if savings is not None:
                saved = GaugeMetricFamily(
                    "kgwe_mig_savings",
                    "What this period's MIG usage would have cost more on whole GPUs",
                    labels=["currency", "period"],
                )
                saved.add_metric([cb.currency, cb.period.label], float(savings))
                yield saved
        used = GaugeMetricFamily(
            "kgwe_budget_used_ratio",
            "Budget spent / limit in its current period",
            labels=["budget", "team", "period"],
        )
        forecast = GaugeMetricFamily(
            "kgwe_budget_forecast_ratio",
            "Forecast end-of-period spend / limit",
            labels=["budget", "team", "period"],
        )
        reached = GaugeMetricFamily(
            "kgwe_budget_threshold_reached_ratio",
            "Highest alert threshold (fraction of the limit) the budget's spend has reached; 0: none",
            labels=["budget", "team", "period"],
        )
        enforced = GaugeMetricFamily(
            "kgwe_budget_enforced", "1 when the budget's quotas are capped", labels=["budget", "team"]
        )
        for st in budgets:
            labels = [st.name, st.team, st.period.label]
            used.add_metric(labels, float(st.used_ratio))
            forecast.add_metric(labels, float(st.forecast_end / st.limit) if st.limit else 0.0)
            reached.add_metric(labels, max((float(a.at_percent) / 100 for a in st.fired), default=0.0))
            enforced.add_metric([st.name, st.team], 1.0 if st.enforce else 0.0)
        yield from (cost, idle, cluster, used, forecast, reached, enforced)
        if self.spool is not None:
            yield GaugeMetricFamily(
                "kgwe_metering_spooled_writes",
                "Metering writes kept on disk while the cost store is unreachable",
                value=len(self.spool),
            )
            yield CounterMetricFamily(
                "kgwe_metering_spool_dropped",
                "Metering writes dropped because the on-disk spool was full",
                value=self.spool.dropped,
            )


_INSTALLED: weakref.WeakKeyDictionary[CollectorRegistry, CostCollector] = weakref.WeakKeyDictionary()


def install(registry: CollectorRegistry = REGISTRY) -> CostCollector:
    """The registry's one cost collector: created and registered on first use, then shared, because a
    registry refuses a second collector of the same series (several CostServices in one process)."""
    collector = _INSTALLED.get(registry)
    if collector is None:
        collector = _INSTALLED[registry] = CostCollector()
        registry.register(collector)
    return collector


def advice_metrics(advice: Advice) -> Iterable[GaugeMetricFamily]:
    """Spot savings per movable GPUWorkload, efficiency scores per team and GPUWorkload, and what completed
    runs cost (series exist only for workloads with GPU usage in the period)."""
    currency = advice.currency
    saving = GaugeMetricFamily(
        "kgwe_spot_saving_per_month",
        "What running this GPUWorkload's movable part on spot would save a month, at this period's rate",
        labels=["namespace", "workload", "team", "currency"],
    )
    interruptions = GaugeMetricFamily(
        "kgwe_spot_interruptions_per_month",
        "Expected spot interruptions a month of a GPUWorkload moved to spot, under the catalog's assumption",
        labels=["namespace", "workload", "team"],
    )
    for a in advice.spot:
        if a.movable:
            saving.add_metric([a.namespace, a.workload, a.team, currency], float(a.saving_per_month))
            interruptions.add_metric([a.namespace, a.workload, a.team], float(a.interruptions_per_month))
    team_score = GaugeMetricFamily(
        "kgwe_cost_efficiency_score",
        "Busy GPU-hours (DCGM engine activity x GPU-hours) per 100 of the currency, per team; basis "
        "'allocation only' counts every held GPU-hour busy",
        labels=["team", "basis"],
    )
    for e in advice.team_efficiency:
        if e.score is not None:
            team_score.add_metric([e.subject, e.basis], float(e.score))
    workload_score = GaugeMetricFamily(
        "kgwe_gpuworkload_cost_efficiency_score",
        "Busy GPU-hours per 100 of the currency, per GPUWorkload",
        labels=["namespace", "workload", "basis"],
    )
    for e in advice.workload_efficiency:
        if e.score is not None:
            namespace, _, workload = e.subject.partition("/")
            workload_score.add_metric([namespace, workload, e.basis], float(e.score))
    run_cost = GaugeMetricFamily(
        "kgwe_gpuworkload_run_cost",
        "What a GPUWorkload that completed this period cost, every attempt included",
        labels=["namespace", "workload", "team", "currency"],
    )
    for r in advice.runs:
        run_cost.add_metric([r.namespace, r.workload, r.team, currency], float(r.cost))
    mean = GaugeMetricFamily(
        "kgwe_cost_per_completed_run",
        "Mean cost of the team's GPUWorkloads that completed this period",
        labels=["team", "currency"],
    )
    completed = GaugeMetricFamily(
        "kgwe_completed_runs", "GPUWorkloads of the team that completed this period", labels=["team"]
    )
    for t in advice.team_runs:
        mean.add_metric([t.team, currency], float(t.mean_cost))
        completed.add_metric([t.team], t.runs)
    yield from (saving, interruptions, team_score, workload_score, run_cost, mean, completed)
