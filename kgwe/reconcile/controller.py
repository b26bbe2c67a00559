"""The controller process: leader election, the webhook/metrics HTTP server, and the reconcile loop over
every PolicyRepository in its namespace.

Triggers: a repository is reconciled when its interval (with ±10% jitter) has passed, when its
generation changed (a spec edit), or at once when a signed webhook push arrives — unless that push only
touched `reports/` (KGWE's own commits), which must never trigger a reconcile. Only the leader reconciles;
every write is additionally gated on the Lease inside the reconcile (see kgwe.cluster.lease).
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.audit.log import COMMIT_INTERVAL_SECONDS
from kgwe.cluster.events import EventRecorder
from kgwe.cluster.lease import LeaderElector
from kgwe.cluster.nodecache import NodeCache
from kgwe.errors import KgweError
from kgwe.gitops.gitcmd import GitAccess
from kgwe.gitops.retry import jittered_interval_seconds
from kgwe.gitops.source import touches_policy
from kgwe.gitops.webhook import ControllerHTTPServer, GetRoute, PushEvent, repository_key
from kgwe.httpd import ServerThread, error_body, metrics_need_token, metrics_port
from kgwe.httpd.metrics_port import plain_metrics
from kgwe.observability.collectors import ClusterStateCollector, read_cluster
from kgwe.reconcile.metrics import ReconcileMetrics
from kgwe.reconcile.rebalancing import ActivityReader
from kgwe.reconcile.repository import (
    GROUP,
    PLURAL,
    VERSION,
    InvalidSpec,
    RepositoryReconciler,
    read_spec,
)
from kgwe.tlsfiles import ServingTLS
from kgwe.vocab import CONTROLLER_NAME, FIELD_MANAGER, RECONCILE_REQUESTED_AT_ANNOTATION

if TYPE_CHECKING:
    from kgwe.gitops.commit_back import CommitResult
    from kgwe.policy.loader import PolicySet
    from kgwe.reconcile.certificates import CertificateKeeper
    from kgwe.reconcile.costs import Alert, CostDuties, QuotaCaps
    from kgwe.reconcile.status import Outcome
    from kgwe.render.render import RenderOptions
    from kgwe.workloads.controller import WorkloadController

log = logging.getLogger(__name__)


REQUESTED_AT_ANNOTATION = RECONCILE_REQUESTED_AT_ANNOTATION
CRD_MISSING = (
    f"the CustomResourceDefinition {PLURAL}.{GROUP} is not installed: install KGWE's CRDs "
    "(helm: crds.install=true; kustomize: deploy/crds/)"
)


def activity_reader(prometheus_url: str | None) -> ActivityReader | None:
    """Mean dcgm-exporter engine activity per pod over a window, from `prometheus_url` (None: no reader)."""
    if not prometheus_url:
        return None
    from kgwe.cost.prometheus import PrometheusClient

    prometheus = PrometheusClient(prometheus_url)
    return lambda start, end: prometheus.pod_engine_activity(start, end)


def _key_of(item: dict[str, Any]) -> str | None:
    """The repository key of a PolicyRepository's spec.url (what webhook pushes are matched on)."""
    url = (item.get("spec") or {}).get("url")
    return repository_key(url) if isinstance(url, str) else None


@dataclass
class _Due:
    at: float
    generation: int | None
    requested: str | None = None


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
        self.audit_interval_seconds = audit_interval_seconds  # how often the audit log is committed at most
        self.certificates = certificates  # KGWE's own TLS certificates, kept by the leader; None: off
        self.prometheus_url = prometheus_url  # dcgm-exporter activity for MIG rebalancing (None: off)
        self.render_options = render_options  # extender URL and TLS for the rendered scheduler config
        self.namespace = namespace
        self.costs = costs  # metering, budgets and cost reports (kgwe.reconcile.costs); None: off
        self.cache_dir = Path(cache_dir)
        self.identity = identity or f"{socket.gethostname()}-{random.randrange(1 << 32):08x}"
        self.metrics = ReconcileMetrics()
        self.metrics.registry.register(  # fleet, GPUWorkload and PolicyRepository gauges, read at scrape
            ClusterStateCollector(lambda: read_cluster(api_client, namespace), self.metrics.node_pools)
        )
        self.recorder = EventRecorder(api_client, allowed=self.is_leader)  # a standby writes no Events
        self.jitter_fraction = jitter_fraction
        self._rng = random.Random()
        self._trigger = threading.Event()
        self._pushed: set[str] = set()  # repository keys named by pushes not yet reconciled
        self._lock = threading.Lock()
        self._due: dict[str, _Due] = {}
        self._workers: dict[str, threading.Thread] = {}  # the reconcile thread of each repository
        self._again: set[str] = set()  # repositories triggered while their reconcile was running
        self._costs_lock = threading.Lock()
        self.git_access = git_access or GitAccess()
        self._reconcilers: dict[str, RepositoryReconciler] = {}
        self.node_cache = NodeCache(api_client)  # the GPU nodes every repository plans for (started by run)
        self.reconciles = 0
        self.crd_missing = False  # the last list of PolicyRepositories said the API does not exist
        self.elector: LeaderElector | None = None
        if leader_election:
            self.elector = LeaderElector(
                api_client,
                name=lease_name,
                namespace=namespace,
                identity=self.identity,
                lease_duration_seconds=lease_duration_seconds,
                renew_deadline_seconds=renew_deadline_seconds,
                retry_period_seconds=retry_period_seconds,
                on_started_leading=self._on_started,
                on_stopped_leading=self._on_stopped,
            )
        self.workloads: WorkloadController | None = None
        if workloads:  # GPUWorkloads: own queue and watches, same Lease (kgwe.workloads.controller)
            from kgwe.workloads.controller import WorkloadController, WorkloadMetrics, WorkloadReconciler

            reconciler = WorkloadReconciler(
                api_client,
                recorder=self.recorder,
                metrics=WorkloadMetrics(self.metrics.registry),
                is_leader=self.is_leader,
                policy_namespace=namespace,
                cost_of=costs.workload_cost if costs is not None else None,
                advise=costs.workload_admission if costs is not None else None,
                finished=costs.workload_finished if costs is not None else None,
            )
            self.workloads = WorkloadController(reconciler)
        self.server: ControllerHTTPServer | None = None
        self.metrics_server: ServerThread | None = None
        if listen is not None:
            # /metrics (budgets and costs) on the plain port on loopback only (or opened to anyone): off
            # loopback it is served over TLS only, for a token allowed to get /metrics (metrics_port)
            plain = plain_metrics(listen[0], public_metrics)
            routes: dict[str, GetRoute] = {
                "/metrics": self._exposition if plain else _over_tls_only,
                "/healthz": lambda: (200, "text/plain", b"ok"),
                "/readyz": self._readyz,
            }
            self.server = ControllerHTTPServer(
                listen, secret=webhook_secret, on_push=self.on_push, get_routes=routes
            )
        if metrics_tls_port is not None:  # GET /metrics for Prometheus, over TLS (kgwe.httpd.metrics_port)
            address, files = metrics_tls_port
            tls = ServingTLS(*files) if files is not None else None
            guard = None
            if metrics_need_token(address[0], public_metrics):
                from kgwe.cluster.access_review import metrics_guard

                guard = metrics_guard(api_client)
            self.metrics_server = ServerThread(
                metrics_port.handler(lambda: (200, self.metrics.exposition(), metrics_port.CONTENT_TYPE)),
                address,
                limits=metrics_port.LIMITS,
                tls=tls.current if tls is not None else None,
                guard=guard,
                label="kgwe controller /metrics listening on",
            )

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
        with self._lock:
            self._due.clear()  # reconcile everything at once: state is read back from the cluster
        self._trigger.set()
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
        if not self.is_leader():
            self._request_from_leader(event.repositories)
            return
        with self._lock:
            self._pushed |= event.repositories
        self._trigger.set()

    def _request_from_leader(self, repositories: frozenset[str]) -> None:
        """Ask the leader to sync now by stamping the PolicyRepositories the push names (a standby got it)."""
        api = client.CustomObjectsApi(self.api_client)
        stamp = f"{time.time():.6f}"
        try:
            items = api.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL).get("items", [])
            for item in items:
                if _key_of(item) not in repositories:
                    continue
                api.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    item["metadata"]["name"],
                    {"metadata": {"annotations": {REQUESTED_AT_ANNOTATION: stamp}}},
                    _content_type="application/merge-patch+json",
                    field_manager=FIELD_MANAGER,
                )
        except ApiException as exc:
            log.warning("could not hand the webhook push to the leader: %s", exc.reason)

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

    def tick(self) -> float:
        """Reconcile every repository that is due; returns seconds until the next one is."""
        if not self.is_leader():
            return 1.0
        try:
            listing = client.CustomObjectsApi(self.api_client).list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL
            )
        except ApiException as exc:
            self.crd_missing = exc.status == 404
            reason = CRD_MISSING if self.crd_missing else exc.reason
            log.warning("listing PolicyRepositories failed: %s", reason)
            return 5.0
        self.crd_missing = False
        with self._lock:
            pushed_keys, self._pushed = self._pushed, set()
        now = time.monotonic()
        next_in = 60.0
        for item in listing.get("items", []):
            meta = item.get("metadata") or {}
            name, generation = str(meta.get("name")), meta.get("generation")
            requested = (meta.get("annotations") or {}).get(REQUESTED_AT_ANNOTATION)
            with self._lock:
                due, worker = self._due.get(name), self._workers.get(name)
            pushed = _key_of(item) in pushed_keys
            wanted = (
                due is None
                or pushed
                or due.generation != generation
                or due.requested != requested
                or now >= due.at
            )
            if worker is not None and worker.is_alive():  # still fetching or applying: never twice at once
                if wanted:
                    with self._lock:
                        self._again.add(name)
                continue  # its end wakes the loop (_trigger)
            if wanted:
                if not self.is_leader():
                    return 1.0
                # Each repository reconciles in its own thread: a slow or hanging Git server delays only
                # its own repository (up to spec.timeout per git call), never the others.
                worker = threading.Thread(
                    target=self._reconcile_one,
                    args=(name, item, pushed),
                    name=f"reconcile-{name}",
                    daemon=True,
                )
                with self._lock:
                    self._workers[name] = worker
                    self._due[name] = due = _Due(float("inf"), generation, requested)
                worker.start()
                continue
            if due is not None:  # not wanted, so it has a due time
                next_in = min(next_in, max(0.05, due.at - time.monotonic()))
        return next_in

    @property
    def busy(self) -> bool:
        """Whether some repository's reconcile is running now."""
        with self._lock:
            return any(w.is_alive() for w in self._workers.values())

    def _reconcile_one(self, name: str, item: dict[str, Any], pushed: bool = False) -> None:
        rec = self._reconciler(name)
        try:
            rec.reconcile(pushed=pushed)
            if self.costs is not None and self.is_leader():
                with self._costs_lock:  # the cost store and its reports are shared by all repositories
                    self.costs.after_reconcile(rec.view(item))
        except Exception:  # one broken repository must not stop the others
            log.exception("reconcile of %s failed", name)
        try:
            interval = read_spec(item).interval_seconds
        except InvalidSpec:
            interval = 60.0
        wait = jittered_interval_seconds(interval, self.jitter_fraction, self._rng)
        with self._lock:
            self.reconciles += 1
            due = self._due.get(name)
            if due is not None:
                due.at = 0.0 if name in self._again else time.monotonic() + wait
            self._again.discard(name)
        self._trigger.set()

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
            listing = client.CustomObjectsApi(self.api_client).list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL
            )
            names = sorted(item["metadata"]["name"] for item in listing.get("items", []))
            return {name: self._reconciler(name).reconcile() for name in names}
        finally:
            stop.set()
            if elector is not None and thread is not None:
                thread.join(timeout=elector.retry_period_seconds + 5.0)

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
        if self.elector is not None:
            self.elector.start(stop)
        elif self.costs is not None:  # acting alone: there is no "became leader" moment
            self.costs.start(self.api_client)
        if self.workloads is not None:
            self.workloads.start(stop)
        self.node_cache.start(stop)
        if self.certificates is not None:
            self.certificates.start(stop, self.is_leader)
        try:
            while not stop.is_set():
                wait = self.tick()
                self._trigger.wait(min(wait, 5.0))
                self._trigger.clear()
        finally:
            if self.server is not None:
                self.server.stop()
            if self.metrics_server is not None:
                self.metrics_server.stop()
            if self.costs is not None:
                self.costs.stop()
            if self.certificates is not None:
                self.certificates.wake.set()  # its loop sees `stop` at once
