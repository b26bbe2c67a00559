"""Prometheus metrics of the reconciler, in their own registry so tests and several
controllers in one process do not collide; `/metrics` serves this registry plus commit-back's counter."""

from __future__ import annotations

from prometheus_client import REGISTRY as DEFAULT_REGISTRY
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class ReconcileMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.duration = Histogram(
            "kgwe_reconcile_duration_seconds",
            "Reconcile duration",
            ["repository"],
            registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.results = Counter(
            "kgwe_reconcile_total", "Reconciles by result", ["repository", "result"], registry=r
        )
        self.last_applied = Gauge(
            "kgwe_last_applied_revision_info",
            "Last applied revision (value 1)",
            ["repository", "revision"],
            registry=r,
        )
        self.applied = Counter(
            "kgwe_objects_applied_total", "Objects created or updated", ["repository"], registry=r
        )
        self.pruned = Counter("kgwe_objects_pruned_total", "Objects pruned", ["repository"], registry=r)
        self.drift = Counter(
            "kgwe_drift_corrected_total", "Hand edits of owned objects undone", ["repository"], registry=r
        )
        self.writes = Counter("kgwe_api_writes_total", "Kubernetes API writes", ["repository"], registry=r)
        self.rollout_pending = Gauge(
            "kgwe_rollout_nodes_pending",
            "Nodes still to get their MIG config",
            ["repository", "pool"],
            registry=r,
        )
        self.rollout_in_progress = Gauge(
            "kgwe_rollout_nodes_in_progress",
            "Nodes relabelled or draining",
            ["repository", "pool"],
            registry=r,
        )
        self.rollout_failed = Gauge(
            "kgwe_rollout_nodes_failed", "Nodes failed or timed out", ["repository", "pool"], registry=r
        )
        self.commit_back_rejected = Counter(
            "kgwe_commit_back_rejected_total",
            "Commit-back pushes refused for good",
            ["repository"],
            registry=r,
        )
        self.hooks = Counter(
            "kgwe_webhook_events_total", "Webhook pushes by outcome", ["outcome"], registry=r
        )
        self.rebalances = Counter(
            "kgwe_mig_rebalances_total",
            "MIG rebalance decisions taken (a new demand target for a pool)",
            ["repository", "pool"],
            registry=r,
        )
        self.leader = Gauge("kgwe_leader", "1 while this replica holds the Lease", registry=r)
        self._node_pools: dict[str, dict[str, str]] = {}  # repository -> node -> MIG pool (fleet gauges)

    def set_node_pools(self, repository: str, node_pool: dict[str, str]) -> None:
        self._node_pools[repository] = dict(node_pool)

    def node_pools(self) -> dict[str, str]:
        """Node -> pool over every repository's last rollout (the fleet gauges' `pool` label)."""
        return {n: p for pools in list(self._node_pools.values()) for n, p in pools.items()}

    def set_last_applied(self, repository: str, revision: str) -> None:
        self.last_applied.clear()
        self.last_applied.labels(repository, revision).set(1)

    def exposition(self) -> bytes:
        return generate_latest(self.registry) + generate_latest(DEFAULT_REGISTRY)
