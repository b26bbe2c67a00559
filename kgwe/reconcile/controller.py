"""The controller process: leader election, the webhook/metrics HTTP server, and the two controllers on the
controller runtime (kgwe.runtime) — the PolicyRepositories of its namespace (kgwe.reconcile.repositories)
and the GPUWorkloads of the cluster (kgwe.workloads.controller) — sharing one cluster client and one Lease.

Triggers of a PolicyRepository: its watch (a spec edit, a reconcile request), its interval (with ±10% jitter),
a failure's backoff, or a signed webhook push that names it — unless that push only touched `reports/`
(KGWE's own commits), which must never trigger a reconcile. Only the leader reconciles; every write is
additionally gated on the Lease inside the reconcile (see kgwe.cluster.lease).
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client

from kgwe.audit.log import COMMIT_INTERVAL_SECONDS
from kgwe.cluster.events import EventRecorder
from kgwe.cluster.lease import LeaderElector
from kgwe.cluster.nodecache import NodeCache
from kgwe.errors import KgweError
from kgwe.gitops.gitcmd import GitAccess
from kgwe.gitops.source import touches_policy
from kgwe.gitops.webhook import ControllerHTTPServer, GetRoute, PushEvent
from kgwe.httpd import ServerThread, error_body, metrics_need_token, metrics_port
from kgwe.httpd.metrics_port import plain_metrics
from kgwe.observability.collectors import ClusterStateCollector, read_cluster
from kgwe.reconcile.metrics import ReconcileMetrics
from kgwe.reconcile.rebalancing import ActivityReader
from kgwe.reconcile.repositories import CRD_MISSING, Reconciler, RepositoryController
from kgwe.reconcile.repository import RepositoryReconciler
from kgwe.runtime.cluster import KubeObject
from kgwe.runtime.kinds import POLICY_REPOSITORY
from kgwe.runtime.kube import KubeCluster
from kgwe.tlsfiles import ServingTLS
from kgwe.vocab import CONTROLLER_NAME

if TYPE_CHECKING:
    from kgwe.gitops.commit_back import CommitResult
    from kgwe.policy.loader import PolicySet
    from kgwe.reconcile.certificates import CertificateKeeper
    from kgwe.reconcile.costs import Alert, CostDuties, QuotaCaps
    from kgwe.reconcile.status import Outcome
    from kgwe.render.options import RenderOptions
    from kgwe.workloads.controller import WorkloadController

log = logging.getLogger(__name__)
# As the controller stops, how long the reconciles running may take to end before the audit log is flushed
# (a pod has 30 s from SIGTERM to SIGKILL by default; the flush's commit needs the rest).
SHUTDOWN_PASS_SECONDS = 10.0


def activity_reader(prometheus_url: str | None) -> ActivityReader | None:
    """Mean dcgm-exporter engine activity per pod over a window, from `prometheus_url` (None: no reader)."""
    if not prometheus_url:
        return None
    from kgwe.cost.prometheus import PrometheusClient

    prometheus = PrometheusClient(prometheus_url)
    return lambda start, end: prometheus.pod_engine_activity(start, end)


def _over_tls_only() -> tuple[int, str, bytes]:
    return 404, "application/json", error_body(metrics_port.OVER_TLS_ONLY)


class Controller:
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        *,
        cache_dir: Path,
        identity: str | None = None,
        webhook_secret: bytes = b"",
        listen: tuple[str, int] | None = ("0.0.0.0", 8080),
        lease_name: str = CONTROLLER_NAME,
        lease_duration_seconds: float = 15.0,
        renew_deadline_seconds: float = 10.0,
        retry_period_seconds: float = 2.0,
        jitter_fraction: float = 0.1,
        leader_election: bool = True,
        costs: CostDuties | None = None,
        render_options: RenderOptions | None = None,
        git_access: GitAccess | None = None,
        workloads: bool = True,
        prometheus_url: str | None = None,
        certificates: CertificateKeeper | None = None,
        public_metrics: bool = False,
        audit_interval_seconds: float = COMMIT_INTERVAL_SECONDS,
        metrics_tls_port: metrics_port.MetricsPort | None = None,
    ) -> None:
        self.api_client = api_client
        self.cluster = KubeCluster(api_client)  # one client (and API discovery) for both controllers
        self.audit_interval_seconds = audit_interval_seconds  # how often the audit log is committed at most
        self.certificates = certificates  # KGWE's own TLS certificates, kept by the leader; None: off
        self.prometheus_url = prometheus_url  # dcgm-exporter activity for MIG rebalancing (None: off)
        self.render_options = render_options  # extender URL and TLS for the rendered scheduler config
        self.namespace = namespace
        self.costs = costs  # metering, budgets and cost reports (kgwe.reconcile.costs); None: off
        self.cache_dir = Path(cache_dir)
        self.identity = identity or f"{socket.gethostname()}-{random.randrange(1 << 32):08x}"
        self.metrics = self._metrics()
        self.recorder = EventRecorder(self.cluster, allowed=self.is_leader)  # a standby writes no Events
        self._costs_lock = threading.Lock()
        self.git_access = git_access or GitAccess()
        self._reconcilers: dict[str, RepositoryReconciler] = {}
        self.node_cache = NodeCache(self.cluster)  # the GPU nodes every repository plans for (started by run)
        lease = (lease_name, lease_duration_seconds, renew_deadline_seconds, retry_period_seconds)
        self.elector = self._elector(*lease) if leader_election else None
        self.repositories = RepositoryController(
            self.cluster,
            namespace,
            self._reconciler,
            gate=self.is_leader,
            after=self._after_reconcile if costs is not None else None,
            jitter_fraction=jitter_fraction,
        )
        self.workloads = self._workload_controller() if workloads else None
        self.server = None if listen is None else self._http_server(listen, webhook_secret, public_metrics)
        self.metrics_server = (
            None if metrics_tls_port is None else self._metrics_server(metrics_tls_port, public_metrics)
        )

    def _metrics(self) -> ReconcileMetrics:
        """The controller's metrics, the fleet, GPUWorkload and PolicyRepository gauges read at scrape."""
        metrics = ReconcileMetrics()
        api, namespace = self.api_client, self.namespace
        metrics.registry.register(
            ClusterStateCollector(lambda: read_cluster(api, namespace), metrics.node_pools)
        )
        return metrics

    def _elector(
        self, name: str, duration_seconds: float, renew_deadline_seconds: float, retry_period_seconds: float
    ) -> LeaderElector:
        """The leader election on the Lease `name` in the controller's namespace (kgwe.cluster.lease)."""
        return LeaderElector(
            self.api_client,
            name=name,
            namespace=self.namespace,
            identity=self.identity,
            lease_duration_seconds=duration_seconds,
            renew_deadline_seconds=renew_deadline_seconds,
            retry_period_seconds=retry_period_seconds,
            on_started_leading=self._on_started,
            on_stopped_leading=self._on_stopped,
        )

    def _workload_controller(self) -> WorkloadController:
        """GPUWorkloads: their own loop and watches, same cluster and Lease (kgwe.workloads.controller)."""
        from kgwe.workloads.controller import WorkloadController, WorkloadMetrics, WorkloadReconciler

        reconciler = WorkloadReconciler(
            self.cluster,
            recorder=self.recorder,
            metrics=WorkloadMetrics(self.metrics.registry),
            is_leader=self.is_leader,
            policy_namespace=self.namespace,
            cost_of=self.costs.workload_cost if self.costs is not None else None,
            advise=self.costs.workload_admission if self.costs is not None else None,
            finished=self.costs.workload_finished if self.costs is not None else None,
        )
        return WorkloadController(reconciler)

    def _http_server(
        self, listen: tuple[str, int], webhook_secret: bytes, public_metrics: bool
    ) -> ControllerHTTPServer:
        """/healthz, /readyz, the webhook and /metrics: budgets and costs, on the plain port on loopback only
        (or opened to anyone); off loopback it is served over TLS only (kgwe.httpd.metrics_port)."""
        plain = plain_metrics(listen[0], public_metrics)
        routes: dict[str, GetRoute] = {
            "/metrics": self._exposition if plain else _over_tls_only,
            "/healthz": lambda: (200, "text/plain", b"ok"),
            "/readyz": self._readyz,
        }
        return ControllerHTTPServer(listen, secret=webhook_secret, on_push=self.on_push, get_routes=routes)

    def _metrics_server(self, port: metrics_port.MetricsPort, public_metrics: bool) -> ServerThread:
        """GET /metrics for Prometheus, over TLS, for a token allowed to get /metrics off loopback."""
        address, files = port
        tls = ServingTLS(*files) if files is not None else None
        guard = None
        if metrics_need_token(address[0], public_metrics):
            from kgwe.cluster.access_review import metrics_guard

            guard = metrics_guard(self.api_client)
        return ServerThread(
            metrics_port.handler(lambda: (200, self.metrics.exposition(), metrics_port.CONTENT_TYPE)),
            address,
            limits=metrics_port.LIMITS,
            tls=tls.current if tls is not None else None,
            guard=guard,
            label="kgwe controller /metrics listening on",
        )

    @property
    def crd_missing(self) -> bool:
        """The PolicyRepository CRD is not installed (its watch says so)."""
        return self.repositories.crd_missing

    @property
    def reconciles(self) -> int:
        """PolicyRepository reconciles run by this replica."""
        return self.repositories.reconciles

    def _exposition(self) -> tuple[int, str, bytes]:
        return 200, metrics_port.CONTENT_TYPE.decode(), self.metrics.exposition()

    def _readyz(self) -> tuple[int, str, bytes]:
        """Ready unless the PolicyRepository CRD is missing (an install with crds.install=false, say)."""
        if self.crd_missing:
            return 503, "text/plain", f"{CRD_MISSING}\n".encode()
        return 200, "text/plain", b"leader" if self.is_leader() else b"standby"

    # -- leadership ----------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return self.elector.is_leader() if self.elector is not None else True

    def _on_started(self) -> None:
        log.info("%s became leader", self.identity)
        self.metrics.leader.set(1)
        if self.costs is not None:
            self.costs.start(self.api_client)
        self.repositories.loop.resync()  # everything at once: state is read back from the cluster
        if self.certificates is not None:
            self.certificates.wake.set()

    def _on_stopped(self) -> None:
        """Lost the lease: stop metering at once (commit-back and Events check leadership themselves)."""
        log.info("%s stopped leading", self.identity)
        self.metrics.leader.set(0)
        if self.costs is not None:
            self.costs.stop()

    # -- triggers ------------------------------------------------------------------------------------
    def on_push(self, event: PushEvent) -> None:
        """A push syncs at once only the PolicyRepositories whose spec.url it names (any URL spelling)."""
        if event.changed_paths and not touches_policy(list(event.changed_paths), ""):
            self.metrics.hooks.labels("ignored_reports_only").inc()
            return
        self.metrics.hooks.labels("triggered").inc()
        self.repositories.push(event.repositories)

    # -- the loop ------------------------------------------------------------------------------------
    def _reconciler(self, name: str) -> RepositoryReconciler:
        rec = self._reconcilers.get(name)
        if rec is None:
            rec = RepositoryReconciler(
                self.api_client,
                self.namespace,
                name,
                cache_dir=self.cache_dir / name,
                metrics=self.metrics,
                recorder=self.recorder,
                is_leader=self.is_leader,
                render_options=self.render_options,
                git_access=self.git_access,
                read_activity=activity_reader(self.prometheus_url),
                budget_caps=self._budget_caps if self.costs is not None else None,
                on_policy_in_force=self._policy_in_force if self.costs is not None else None,
                mig_outlooks=self.costs.mig_outlooks if self.costs is not None else None,
                node_cache=self.node_cache,
                audit_flush_seconds=self.audit_interval_seconds,
            )
            self._reconcilers[name] = rec
        return rec

    def _budget_caps(
        self, repository: str, policy: PolicySet, pods: Sequence[Mapping[str, Any]], record: Alert
    ) -> QuotaCaps:
        """The Enforce caps a repository's build renders its budget quotas with (the cost duties')."""
        assert self.costs is not None
        with self._costs_lock:
            return self.costs.budget_caps(repository, policy, pods, record)

    def _policy_in_force(self, policy: PolicySet) -> None:
        """GPUWorkloads are costed at the prices of the policy in force: once they change (first known
        after a start, or a new catalog applied), every workload's cost is brought up to date at once."""
        assert self.costs is not None
        with self._costs_lock:
            changed = self.costs.prices_in_force(policy)
        if changed and self.workloads is not None and self.is_leader():
            self.workloads.resync()

    def _after_reconcile(self, rec: Reconciler, repo: KubeObject) -> None:
        """The cost duties after a repository's pass (the store and its reports are shared by all)."""
        assert self.costs is not None and isinstance(rec, RepositoryReconciler)
        with self._costs_lock:
            self.costs.after_reconcile(rec.view(repo))

    def reconcile_once(self, leader_wait_seconds: float) -> dict[str, Outcome | None]:
        """Reconcile every PolicyRepository once, as the leader, and return what each reconcile found.

        For `kgwe controller --once` (a Job, CI, a smoke test of an image): it campaigns for the Lease like
        the long-running controller, so it never acts beside a running leader, and gives the Lease up after.
        """
        stop = threading.Event()
        elector = self.elector  # None: --no-leader-election, acting alone
        thread = elector.start(stop) if elector is not None else None
        try:
            deadline = time.monotonic() + leader_wait_seconds
            while elector is not None and not elector.is_leader():
                if time.monotonic() >= deadline:
                    raise KgweError(
                        f"could not take the Lease {self.namespace}/{elector.name} within "
                        f"{leader_wait_seconds:g} s: another controller holds it, or the apiserver is "
                        "unreachable (see the log above)"
                    )
                time.sleep(0.1)
            listing = self.cluster.list(POLICY_REPOSITORY, self.namespace)
            names = sorted(item["metadata"]["name"] for item in listing)
            return {name: self._reconciler(name).reconcile() for name in names}
        finally:
            stop.set()
            if elector is not None and thread is not None:
                thread.join(timeout=elector.retry_period_seconds + 5.0)

    def _flush_audit(self) -> None:
        """As the controller stops, still the leader: each repository's waiting audit entries are committed
        (they live in this process only), once the reconciles running have ended."""
        if not self.is_leader():
            return
        if not self.repositories.join_workers(SHUTDOWN_PASS_SECONDS):
            log.warning("reconciles still run after %gs: the audit log is not flushed", SHUTDOWN_PASS_SECONDS)
            return
        for name, rec in sorted(self._reconcilers.items()):
            try:
                if rec.flush_audit():
                    log.info("committed the waiting audit entries of %s/%s", self.namespace, name)
            except Exception as exc:  # one repository's failure must not keep the others' entries
                log.warning("could not commit the audit entries of %s/%s: %s", self.namespace, name, exc)

    def commit_reports_now(self, name: str) -> CommitResult | None:
        """Commit repository `name`'s cost reports now, off schedule (the cost duties' own commit path);
        the CommitResult, or None without cost duties, a valid policy with prices, or spec.reports."""
        if self.costs is None:
            return None
        rec = self._reconciler(name)
        repo = rec.read()
        if repo is None:
            return None
        with self._costs_lock:
            return self.costs.commit_reports_now(rec.view(repo))

    def run(self, stop: threading.Event) -> None:
        if self.server is not None:
            self.server.start()
        if self.metrics_server is not None:
            self.metrics_server.start(name="kgwe-metrics")
        lease_stop = threading.Event()  # set after the audit log is flushed: the leader flushes it
        lease = self.elector.start(lease_stop) if self.elector is not None else None
        if self.elector is None and self.costs is not None:  # acting alone: no "became leader" moment
            self.costs.start(self.api_client)
        if self.workloads is not None:
            self.workloads.start(stop)
        self.node_cache.start(stop)
        if self.certificates is not None:
            self.certificates.start(stop, self.is_leader)
        self.repositories.start(stop)
        try:
            stop.wait()
        finally:
            if self.server is not None:
                self.server.stop()
            if self.metrics_server is not None:
                self.metrics_server.stop()
            if self.costs is not None:
                self.costs.stop()
            if self.certificates is not None:
                self.certificates.wake.set()  # its loop sees `stop` at once
            self._flush_audit()
            lease_stop.set()
            if lease is not None and self.elector is not None:
                lease.join(timeout=self.elector.retry_period_seconds + 5.0)
