"""Gauges read from cluster objects at scrape time: the GPU fleet (GPU Nodes and the pods holding their
GPUs), GPUWorkloads by phase and gang wait, and PolicyRepository Ready/Stalled.

The controller registers one `ClusterStateCollector` on its /metrics registry. Reads are cached for
`ttl_seconds` so several Prometheus replicas scraping do not multiply API lists; a failed read keeps the
last good snapshot, counts the error and never breaks the scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used
    from kubernetes import client

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kgwe.observability.fleet import FleetStats, fleet_stats
from kgwe.observability.topology import TopologySamples, topology_samples
from kgwe.observability.workloads import workload_stats
from kgwe.runtime.conditions import READY, STALLED, is_true, of
from kgwe.vocab import API_GROUP, CRD_VERSION, POLICY_REPOSITORY_PLURAL

log = logging.getLogger(__name__)

Reader = Callable[[], "ClusterSnapshot"]


@dataclass
class ClusterSnapshot:
    nodes: list[dict[str, Any]] = field(default_factory=list)  # GPU nodes
    gpu_pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # node -> non-terminal GPU pods
    workloads: list[dict[str, Any]] = field(default_factory=list)  # GPUWorkloads, all namespaces
    repositories: list[dict[str, Any]] = field(default_factory=list)  # PolicyRepositories of the controller


def read_cluster(api_client: client.ApiClient, namespace: str) -> ClusterSnapshot:
    """The objects the gauges need, as plain dicts (one list call per kind)."""
    from kubernetes import client

    from kgwe.cluster.client import list_gpu_workloads, list_items
    from kgwe.cluster.nodes import gpu_pods_by_node
    from kgwe.vocab import GPU_NODE_SELECTOR

    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    snap = ClusterSnapshot(
        nodes=list_items(core.list_node, label_selector=GPU_NODE_SELECTOR),
        gpu_pods=gpu_pods_by_node(core),
        workloads=list_gpu_workloads(api_client),
    )
    snap.repositories = list_items(
        custom.list_namespaced_custom_object,
        group=API_GROUP,
        version=CRD_VERSION,
        namespace=namespace,
        plural=POLICY_REPOSITORY_PLURAL,
    )
    return snap


class ClusterStateCollector(Collector):
    def __init__(
        self,
        read: Reader,
        node_pool: Callable[[], Mapping[str, str]] = dict,
        *,
        ttl_seconds: float = 15.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._read = read
        self._node_pool = node_pool
        self._ttl = ttl_seconds
        self._now = now
        self._lock = threading.Lock()
        self._snapshot: ClusterSnapshot | None = None
        self._read_at = float("-inf")
        self.errors = 0

    def snapshot(self) -> ClusterSnapshot | None:
        with self._lock:
            if time.monotonic() - self._read_at >= self._ttl:
                self._read_at = time.monotonic()  # one try per ttl, even when it fails
                try:
                    self._snapshot = self._read()
                except Exception as exc:  # a failed read must never break /metrics
                    self.errors += 1
                    log.warning("reading cluster state for metrics failed: %s", exc)
            return self._snapshot

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        yield CounterMetricFamily(
            "kgwe_cluster_state_read_errors",
            "Failed reads of cluster objects for the fleet, workload and repository gauges",
            value=self.errors,
        )
        snap = self.snapshot()
        if snap is None:
            return
        yield from _fleet_metrics(fleet_stats(snap.nodes, snap.gpu_pods, self._node_pool()))
        yield from _topology_metrics(topology_samples(snap.nodes))
        phases, waits = workload_stats(snap.workloads, self._now())
        g = GaugeMetricFamily("kgwe_gpuworkloads", "GPUWorkloads by phase", labels=["phase"])
        for phase, n in sorted(phases.items()):
            g.add_metric([phase], n)
        yield g
        g = GaugeMetricFamily(
            "kgwe_gpuworkload_gang_wait_seconds",
            "How long the oldest unfinished GPUWorkload of the namespace has waited for all its pods "
            "to be scheduled",
            labels=["namespace"],
        )
        for ns, seconds in sorted(waits.items()):
            g.add_metric([ns], seconds)
        yield g
        ready = GaugeMetricFamily(
            "kgwe_policyrepository_ready", "1 while the PolicyRepository is Ready", labels=["repository"]
        )
        stalled = GaugeMetricFamily(
            "kgwe_policyrepository_stalled",
            "1 while the PolicyRepository is Stalled (a rollout stopped, or a spec error)",
            labels=["repository"],
        )
        for repo in snap.repositories:
            name = str((repo.get("metadata") or {}).get("name", ""))
            ready.add_metric([name], 1.0 if is_true(of(repo), READY) else 0.0)
            stalled.add_metric([name], 1.0 if is_true(of(repo), STALLED) else 0.0)
        yield ready
        yield stalled


def _fleet_metrics(stats: FleetStats) -> Iterable[GaugeMetricFamily]:
    def family(name: str, doc: str, labels: list[str], values: Mapping[Any, int]) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=labels)
        for key, value in sorted(values.items()):
            g.add_metric(list(key), value)
        return g

    yield family("kgwe_fleet_gpus", "GPUs of GPU nodes", ["pool", "product"], stats.gpus)
    yield family(
        "kgwe_fleet_gpus_allocated",
        "GPUs held by pods (whole GPUs, and shared GPUs with at least one replica held)",
        ["pool", "product"],
        stats.gpus_allocated,
    )
    yield family(
        "kgwe_fleet_gpus_unhealthy",
        "GPUs listed in the kgwe.nvidia.io/gpu-health Node annotation",
        ["pool", "product"],
        stats.gpus_unhealthy,
    )
    yield family(
        "kgwe_fleet_mig_instances",
        "MIG instances the device plugin advertises, used or free",
        ["pool", "profile", "state"],
        stats.mig_instances,
    )
    yield family(
        "kgwe_fleet_shared_gpu_replicas",
        "Replicas of shared (time-sliced or MPS) GPUs, used or free",
        ["pool", "state"],
        stats.shared_replicas,
    )
    yield family(
        "kgwe_fleet_mig_config_nodes",
        "GPU nodes by the MIG manager's nvidia.com/mig.config.state",
        ["pool", "state"],
        stats.mig_nodes,
    )
    yield family(
        "kgwe_fleet_node_mig_config_failed",
        "1 for each node whose MIG manager reports nvidia.com/mig.config.state=failed",
        ["node", "pool"],
        {key: 1 for key in stats.mig_failed_nodes},
    )


def _topology_metrics(samples: TopologySamples) -> Iterable[GaugeMetricFamily]:
    info = GaugeMetricFamily(
        "kgwe_node_topology_info",
        "1 per GPU node with the agent's kgwe.nvidia.io/topology annotation, labelled with its class",
        labels=["node", "topology"],
    )
    for node, name in samples.nodes:
        info.add_metric([node, name], 1)
    gpus = GaugeMetricFamily(
        "kgwe_node_gpu_info",
        "1 per GPU of a node, as the agent discovered it",
        labels=["node", "gpu", "model", "numa_node", "mig"],
    )
    for gpu in samples.gpus:
        gpus.add_metric(list(gpu), 1)
    links = GaugeMetricFamily(
        "kgwe_node_gpu_link_gbps",
        "Estimated GB/s per direction between two GPUs of a node; link is the nvidia-smi topo -m label",
        labels=["node", "gpu_a", "gpu_b", "link"],
    )
    for pair, gbps in samples.links:
        links.add_metric(list(pair), gbps)
    invalid = GaugeMetricFamily(
        "kgwe_fleet_topology_annotations_invalid",
        "GPU nodes whose kgwe.nvidia.io/topology annotation does not decode",
        value=samples.invalid,
    )
    yield from (info, gpus, links, invalid)
