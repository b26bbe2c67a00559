"""KGWE's Grafana dashboards, built in code with grafana-foundation-sdk (not hand-edited JSON).

`python -m kgwe.observability.dashboards` writes them to the chart (deploy/helm/kgwe/files/monitoring/
dashboards/), which ships them as ConfigMaps labelled `grafana_dashboard` for Grafana's sidecar; a test
regenerates them and fails on any difference, and parses every query with promtool. Queries use fixed
`[5m]` windows (no Grafana-only variables) so Prometheus's own parser can check them; GPU panels that need
DCGM use dcgm-exporter's metric names.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack

from kgwe.resources import deploy_dir

DASHBOARDS_DIR = deploy_dir() / "helm" / "kgwe" / "files" / "monitoring" / "dashboards"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class PanelSpec:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat", or "table" (instant queries, one row per series)
    description: str = ""
    dcgm: bool = False  # needs dcgm-exporter (not KGWE) to have data


class _PanelOptions(TypedDict, total=False):
    unit: str
    kind: str
    description: str
    dcgm: bool


# (uid, title, rows), each row (title, panels)
Dashboard = tuple[str, str, tuple[tuple[str, tuple[PanelSpec, ...]], ...]]


def _p(title: str, *queries: Query, **kw: Unpack[_PanelOptions]) -> PanelSpec:
    return PanelSpec(title, tuple(queries), **kw)


def _q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


# ---- the four dashboards: (uid, title, rows of panels) -----------------------------------------------------
FLEET = (
    "kgwe-fleet",
    "KGWE / GPU fleet",
    (
        (
            "GPUs",
            (
                _p(
                    "GPUs by product and pool",
                    _q("sum by (product, pool) (kgwe_fleet_gpus)", "{{pool}} {{product}}"),
                ),
                _p(
                    "Allocated vs idle GPUs",
                    _q("sum(kgwe_fleet_gpus_allocated)", "allocated"),
                    _q("sum(kgwe_fleet_gpus) - sum(kgwe_fleet_gpus_allocated)", "idle"),
                ),
                _p(
                    "GPU allocation ratio",
                    _q("sum(kgwe_fleet_gpus_allocated) / clamp_min(sum(kgwe_fleet_gpus), 1)"),
                    unit="percentunit",
                    kind="stat",
                ),
                _p(
                    "Unhealthy GPUs",
                    _q("sum by (pool, product) (kgwe_fleet_gpus_unhealthy)", "{{pool}} {{product}}"),
                    description="GPUs the node agent lists in kgwe.nvidia.io/gpu-health",
                ),
            ),
        ),
        (
            "MIG and sharing",
            (
                _p(
                    "MIG instances by profile (used vs free)",
                    _q("sum by (profile, state) (kgwe_fleet_mig_instances)", "{{profile}} {{state}}"),
                ),
                _p(
                    "MIG layout per pool",
                    _q("sum by (pool, profile) (kgwe_fleet_mig_instances)", "{{pool}} {{profile}}"),
                ),
                _p(
                    "Shared GPU replicas (used vs free)",
                    _q("sum by (pool, state) (kgwe_fleet_shared_gpu_replicas)", "{{pool}} {{state}}"),
                ),
                _p(
                    "GPU utilisation (DCGM)",
                    _q("avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", "{{Hostname}}"),
                    unit="percent",
                    dcgm=True,
                ),
            ),
        ),
        (
            "Topology",
            (
                _p(
                    "GPU links per node",
                    _q("count by (node, link) (kgwe_node_gpu_link_gbps)"),
                    kind="table",
                    description="GPU pairs of each node by link (nvidia-smi topo -m: NV<n> NVLinks, PIX/PXB "
                    "one PCIe switch, PHB/NODE through a CPU, SYS across CPUs), from the agent's "
                    "kgwe.nvidia.io/topology annotation",
                ),
                _p(
                    "GPU pair bandwidth (GB/s per direction)",
                    _q("max by (node, gpu_a, gpu_b, link) (kgwe_node_gpu_link_gbps)"),
                    kind="table",
                    description="Every GPU pair of every node with its link and estimated bandwidth; "
                    "`kgwe nodes NODE -o wide` shows one node as a matrix",
                ),
                _p(
                    "GPUs per node",
                    _q("max by (node, gpu, model, numa_node, mig) (kgwe_node_gpu_info)"),
                    kind="table",
                ),
                _p(
                    "Slowest GPU pair per node (GB/s)",
                    _q("min by (node) (kgwe_node_gpu_link_gbps)", "{{node}}"),
                    description="What the worst-placed pair of a node's GPUs gets; a multi-GPU pod "
                    "spanning it runs at this rate",
                ),
            ),
        ),
    ),
)

_EXTENDER_BUCKETS = "sum by (le, verb) (rate(kgwe_extender_request_seconds_bucket[5m]))"
SCHEDULING = (
    "kgwe-scheduling",
    "KGWE / Scheduling",
    (
        (
            "Extender",
            (
                _p(
                    "Extender decisions/s",
                    _q("sum by (verb) (rate(kgwe_extender_requests_total[5m]))", "{{verb}}"),
                    unit="reqps",
                ),
                _p(
                    "Extender latency p50 / p99",
                    _q(f"histogram_quantile(0.5, {_EXTENDER_BUCKETS})", "p50 {{verb}}"),
                    _q(f"histogram_quantile(0.99, {_EXTENDER_BUCKETS})", "p99 {{verb}}"),
                    unit="s",
                ),
                _p(
                    "Filter failure reasons",
                    _q("sum by (reason) (increase(kgwe_extender_filter_failures_total[5m]))", "{{reason}}"),
                ),
                _p(
                    "Assumptions held and expired",
                    _q("sum(kgwe_extender_assumed_pods)", "held"),
                    _q("sum(increase(kgwe_extender_assumptions_expired_total[5m]))", "expired"),
                ),
            ),
        ),
        (
            "GPUWorkloads",
            (
                _p("GPUWorkloads by phase", _q("sum by (phase) (kgwe_gpuworkloads)", "{{phase}}")),
                _p(
                    "Longest gang wait",
                    _q("max by (namespace) (kgwe_gpuworkload_gang_wait_seconds)", "{{namespace}}"),
                    unit="s",
                ),
                _p(
                    "Workload reconcile p99",
                    _q(
                        "histogram_quantile(0.99, sum by (le) "
                        "(rate(kgwe_gpuworkload_reconcile_duration_seconds_bucket[5m])))"
                    ),
                    unit="s",
                ),
            ),
        ),
    ),
)

ROLLOUT = (
    "kgwe-rollout",
    "KGWE / Policy rollout",
    (
        (
            "PolicyRepositories",
            (
                _p(
                    "Ready / Stalled",
                    _q("max by (repository) (kgwe_policyrepository_ready)", "ready {{repository}}"),
                    _q("max by (repository) (kgwe_policyrepository_stalled)", "stalled {{repository}}"),
                ),
                _p(
                    "Applied revision",
                    _q("max by (repository, revision) (kgwe_last_applied_revision_info)", "{{revision}}"),
                    kind="stat",
                ),
                _p(
                    "Reconcile duration p99",
                    _q(
                        "histogram_quantile(0.99, sum by (le, repository) "
                        "(rate(kgwe_reconcile_duration_seconds_bucket[5m])))",
                        "{{repository}}",
                    ),
                    unit="s",
                ),
                _p(
                    "Reconciles by result",
                    _q("sum by (result) (increase(kgwe_reconcile_total[5m]))", "{{result}}"),
                ),
            ),
        ),
        (
            "MIG rollout",
            (
                _p(
                    "Rollout progress per pool",
                    _q("sum by (pool) (kgwe_rollout_nodes_pending)", "pending {{pool}}"),
                    _q("sum by (pool) (kgwe_rollout_nodes_in_progress)", "in progress {{pool}}"),
                    _q("sum by (pool) (kgwe_rollout_nodes_failed)", "failed {{pool}}"),
                ),
                _p(
                    "Nodes by MIG manager state",
                    _q("sum by (state) (kgwe_fleet_mig_config_nodes)", "{{state}}"),
                ),
                _p(
                    "MIG rebalance decisions per pool (1h)",
                    _q("sum by (pool) (increase(kgwe_mig_rebalances_total[1h]))", "{{pool}}"),
                    description="Demand-driven layout changes (MIGRebalance Events say why)",
                ),
                _p(
                    "Commit-back results",
                    _q("sum by (result) (increase(kgwe_commit_back_total[1h]))", "{{result}}"),
                ),
            ),
        ),
    ),
)

COST = (
    "kgwe-cost",
    "KGWE / Cost",
    (
        (
            "Spend",
            (
                _p("Spend by team", _q("sum by (team, currency) (kgwe_gpu_cost)", "{{team}} {{currency}}")),
                _p(
                    "Spend by namespace",
                    _q("sum by (namespace, currency) (kgwe_gpu_cost)", "{{namespace}} {{currency}}"),
                ),
                _p("Idle cost", _q("sum by (currency) (kgwe_idle_gpu_cost)", "{{currency}}")),
                _p(
                    "Savings from MIG vs whole-GPU allocation",
                    _q("sum by (currency) (kgwe_mig_savings)", "{{currency}}"),
                    description="What this period's MIG pods would have cost more on whole GPUs",
                ),
                _p(
                    "Idle share of cluster cost",
                    _q("sum(kgwe_idle_gpu_cost) / clamp_min(sum(kgwe_cluster_gpu_cost), 1e-9)"),
                    unit="percentunit",
                    kind="stat",
                ),
            ),
        ),
        (
            "Budgets",
            (
                _p(
                    "Budget burn vs limit, with forecast",
                    _q("max by (budget) (kgwe_budget_used_ratio)", "used {{budget}}"),
                    _q("max by (budget) (kgwe_budget_forecast_ratio)", "forecast {{budget}}"),
                    _q("max by (budget) (kgwe_budget_threshold_reached_ratio)", "threshold {{budget}}"),
                    unit="percentunit",
                ),
                _p("Budgets enforced", _q("sum(kgwe_budget_enforced)"), kind="stat"),
            ),
        ),
        (
            "Advice",
            (
                _p(
                    "Spot savings available per month",
                    _q("sum by (team, currency) (kgwe_spot_saving_per_month)", "{{team}} {{currency}}"),
                    description="What the GPUWorkloads that could run on spot would save a month at this "
                    "month's rate (assumption: the PricingCatalog's spotInterruptionRate; reports/…/spot.md)",
                ),
                _p(
                    "GPUWorkloads that could move to spot",
                    _q("max by (namespace, workload, team, currency) (kgwe_spot_saving_per_month)"),
                    kind="table",
                ),
                _p(
                    "Cost efficiency by team (busy GPU-hours per 100)",
                    _q("max by (team, basis) (kgwe_cost_efficiency_score)", "{{team}} ({{basis}})"),
                    description="GPU-hours weighted by DCGM engine activity per 100 of the currency; "
                    "basis 'allocation only' (no DCGM) counts every held GPU-hour busy",
                ),
                _p(
                    "Least cost-efficient GPUWorkloads",
                    _q(
                        "bottomk(10, max by (namespace, workload, basis) "
                        "(kgwe_gpuworkload_cost_efficiency_score))"
                    ),
                    kind="table",
                ),
                _p(
                    "Cost per completed run by team",
                    _q("max by (team, currency) (kgwe_cost_per_completed_run)", "{{team}} {{currency}}"),
                    description="Mean cost of the team's GPUWorkloads that completed this month, every "
                    "attempt included",
                ),
                _p(
                    "Completed GPUWorkload runs",
                    _q("max by (namespace, workload, team, currency) (kgwe_gpuworkload_run_cost)"),
                    kind="table",
                ),
            ),
        ),
    ),
)

DASHBOARDS = (FLEET, SCHEDULING, ROLLOUT, COST)


def panels(dashboard: Dashboard) -> list[PanelSpec]:
    return [p for _, row in dashboard[2] for p in row]


def all_queries() -> list[tuple[str, str, PanelSpec]]:
    """(dashboard uid, expr, panel) for every query of every dashboard."""
    return [(d[0], q.expr, p) for d in DASHBOARDS for p in panels(d) for q in p.queries]


def build(dashboard: Dashboard) -> dict[str, Any]:
    """The Grafana dashboard JSON model of one dashboard."""
    from grafana_foundation_sdk.builders import stat, table, timeseries
    from grafana_foundation_sdk.builders.dashboard import Dashboard as DashboardBuilder
    from grafana_foundation_sdk.builders.dashboard import DatasourceVariable, Row
    from grafana_foundation_sdk.builders.prometheus import Dataquery
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import DataSourceRef
    from grafana_foundation_sdk.models.prometheus import PromQueryFormat

    uid, title, rows = dashboard
    source = DataSourceRef(type_val="prometheus", uid="${datasource}")
    board = (
        DashboardBuilder(title)
        .uid(uid)
        .tags(["kgwe", "gpu"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("utc")
        .with_variable(DatasourceVariable("datasource").label("Data source").type("prometheus"))
    )
    next_id = 1
    for row_title, row_panels in rows:
        board = board.with_row(Row(row_title).id(next_id))
        next_id += 1
        for spec in row_panels:
            if spec.kind == "stat":
                builder: stat.Panel | table.Panel | timeseries.Panel = stat.Panel()
            elif spec.kind == "table":
                builder = table.Panel()
            else:
                builder = timeseries.Panel()
            builder = builder.id(next_id).title(spec.title)
            next_id += 1
            builder = builder.datasource(source).unit(spec.unit).height(8).span(12)
            if spec.description or spec.dcgm:
                note = spec.description or ""
                if spec.dcgm:
                    note = (note + " " if note else "") + "Needs dcgm-exporter."
                builder = builder.description(note)
            for ref, query in enumerate(spec.queries):
                target = (
                    Dataquery().expr(query.expr).legend_format(query.legend or "__auto").ref_id(chr(65 + ref))
                )
                if spec.kind == "table":  # the series now, one row each, labels as columns
                    target = target.format(PromQueryFormat.TABLE).instant()
                builder = builder.with_target(target)
            board = board.with_panel(builder)
    model: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return model


def render_all() -> dict[str, str]:
    """file name -> JSON text, for every dashboard (deterministic)."""
    return {f"{d[0]}.json": json.dumps(build(d), indent=2, sort_keys=True) + "\n" for d in DASHBOARDS}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DASHBOARDS_DIR)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in render_all().items():
        (args.out / name).write_text(text)
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
