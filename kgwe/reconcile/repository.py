"""Reconcile one PolicyRepository, in small steps as Flux's kustomize-controller does:

    fetch → validate → observe → build → apply → rollout → health → status

fetch resolves the tracked ref in a private Git mirror; validate loads and checks that revision's policy
(an invalid one keeps the last good revision converging); observe reads the GPU nodes and live pods; build
plans MIG layouts and renders the objects, budget quotas with this pass's Enforce caps; apply server-side
applies what differs and prunes what is gone (every write of the pass leaves through kgwe.reconcile.writes);
rollout relabels nodes under each pool's gates; health and status sum the pass up (kgwe.reconcile.summary)
and write status only when it changed, with Events and metrics on the way.

The audit trail (docs/audit.md): every write of a pass, and every Event that tells of one, carries the
policy commit converged and its author (kgwe.audit.stamp); a pass that wrote anything adds one entry to the
audit log, which the leader appends to `<reports path>/audit/<YYYY-MM>.jsonl` with the next inventory
snapshot, or on its own at most every `audit_flush_seconds`, checked against the state KGWE keeps of it in
status (kgwe.reconcile.audit_trail, kgwe.audit.log).

What is kept between reconciles is only a cache (the Git mirror, the last snapshot hash, the loaded
revisions, the last inventory and desired state under keys covering all their inputs — kgwe.reconcile.memo):
everything that matters — the applied inventory, the revisions, where each node's MIG rollout stands — is
read back from the cluster, so any replica that becomes leader continues exactly where the previous one
stopped.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.audit.log import COMMIT_INTERVAL_SECONDS
from kgwe.audit.stamp import Stamp
from kgwe.cluster.apply import ObjectRef, SyncResult
from kgwe.cluster.events import MAX_MESSAGE_CHARS, EventRecorder
from kgwe.cluster.inventory import GpuNodeFacts, facts_from_objects
from kgwe.cluster.nodecache import NodeCache
from kgwe.cluster.nodes import LIVE_PODS, gpu_pods_on_nodes
from kgwe.errors import KgweError
from kgwe.fleet.nodes import device_plugin_states
from kgwe.gitops.commit_back import Content
from kgwe.gitops.gitcmd import GitAccess, UnsafeGitArgument
from kgwe.gitops.source import GitSource, GitSourceError, Revision
from kgwe.observability import tracing
from kgwe.policy.cluster_kinds import PolicyRepositorySpec
from kgwe.policy.loader import PolicySet
from kgwe.reconcile.audit_trail import AuditTrail
from kgwe.reconcile.collector import collector_held
from kgwe.reconcile.costs import QuotaCaps, RepositoryView
from kgwe.reconcile.desired import (
    Desired,
    Inventory,
    MigConfigs,
    build_desired,
    mig_configs_of,
    read_inventory,
    rollout_revision,
)
from kgwe.reconcile.memo import Memo, fingerprint, planned_facts
from kgwe.reconcile.metrics import ReconcileMetrics
from kgwe.reconcile.mig_rollout import run_mig_rollout
from kgwe.reconcile.rebalancing import (
    UTILIZATION_CONDITION,
    ActivityReader,
    OutlookSource,
    RebalanceResult,
    rebalance,
    rebalancing_strategies,
    records_in_force,
    snapshot_demand,
)
from kgwe.reconcile.release_step import Release, deleting
from kgwe.reconcile.repository_git import RepositoryGit
from kgwe.reconcile.rollout import RolloutPlan, plan_rollout
from kgwe.reconcile.scheduler_restart import SchedulerSync
from kgwe.reconcile.sharing_rollout import merge as merge_plans
from kgwe.reconcile.sharing_rollout import named_sharing_configs, run_sharing_rollout
from kgwe.reconcile.status import SUMMARY_CONDITIONS, Outcome, condition, next_status
from kgwe.reconcile.summary import MAX_ERRORS_IN_MESSAGE, Pass, error_lines, health, summarize
from kgwe.reconcile.writes import ClusterWrites
from kgwe.render.objects import budget_quotas
from kgwe.render.options import RenderOptions
from kgwe.runtime.cluster import Cluster, KubeObject
from kgwe.runtime.conditions import status_of
from kgwe.runtime.kinds import CONFIG_MAP, NODE, POD, POLICY_REPOSITORY
from kgwe.runtime.kube import as_cluster
from kgwe.runtime.leader import Gate, NotLeader, alone
from kgwe.runtime.status import StatusPatcher
from kgwe.vocab import (
    API_GROUP,
    CRD_VERSION,
    DEVICE_PLUGIN_DAEMONSET,
    GPU_NODE_SELECTOR,
    POLICY_REPOSITORY_PLURAL,
    repository_label_value,
)

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = API_GROUP, CRD_VERSION, POLICY_REPOSITORY_PLURAL

CACHE_WAIT_SECONDS = 10.0  # how long the node cache may take to show this process's node patches (else: list)
INVALID_SPEC_INTERVAL_SECONDS = 60.0  # how often a repository whose spec does not validate is read again
OWNED_CONDITIONS = (*SUMMARY_CONDITIONS, UTILIZATION_CONDITION)  # the conditions the reconciler writes

Loaded = tuple[PolicySet | None, list[str]]  # a revision's policy (None: could not be read) and its errors


class BudgetCaps(Protocol):
    """The Enforce caps of a policy's budgets (kgwe.reconcile.costs.CostDuties.budget_caps)."""

    def __call__(
        self,
        repository: str,
        policy: PolicySet,
        pods: Sequence[Mapping[str, Any]],
        record: Callable[[str, str, str], None],
    ) -> QuotaCaps: ...


@dataclass(frozen=True)
class Observed:
    """The cluster as the observe step read it: GPU nodes, live pods, and those no node holds yet."""

    facts: list[GpuNodeFacts]
    pods: list[KubeObject]
    unscheduled: list[KubeObject]


class InvalidSpec(KgweError):
    """The PolicyRepository's spec does not validate; the message names the field path."""


def read_spec(repo: Mapping[str, Any]) -> PolicyRepositorySpec:
    """The typed spec of a PolicyRepository object as read from the API (one validation per reconcile)."""
    from pydantic import ValidationError

    from kgwe.policy.diagnostics import format_path, messages_from_validation

    try:
        return PolicyRepositorySpec.model_validate(repo.get("spec") or {})
    except ValidationError as exc:
        problems = [
            f"{format_path(('spec', *loc))}: {message}"
            for loc, message in messages_from_validation(PolicyRepositorySpec, exc)
        ]
        raise InvalidSpec("invalid spec: " + "; ".join(problems[:MAX_ERRORS_IN_MESSAGE])) from None


class RepositoryReconciler:
    def __init__(
        self,
        cluster: Cluster | client.ApiClient,
        namespace: str,
        name: str,
        *,
        cache_dir: Path,
        metrics: ReconcileMetrics | None = None,
        recorder: EventRecorder | None = None,
        is_leader: Gate = alone,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        git_attempts: int = 3,
        git_access: GitAccess | None = None,
        render_options: RenderOptions | None = None,
        read_activity: ActivityReader | None = None,
        budget_caps: BudgetCaps | None = None,
        on_policy_in_force: Callable[[PolicySet], None] | None = None,
        mig_outlooks: OutlookSource | None = None,
        node_cache: NodeCache | None = None,
        audit_flush_seconds: float = COMMIT_INTERVAL_SECONDS,
    ) -> None:
        self.cluster = as_cluster(cluster)  # an ApiClient: its API server
        self.namespace = namespace
        self.name = name
        self.read_activity = read_activity  # dcgm-exporter engine activity per pod (None: no Prometheus)
        self.budget_caps = budget_caps  # the cost duties' Enforce caps (None: budgets are never capped)
        self.on_policy_in_force = on_policy_in_force  # told each policy once it is the one in force
        self.mig_outlooks = mig_outlooks  # the optimizer's expected MIG demand per pool (None: reactive only)
        self.node_cache = node_cache  # the GPU nodes kept by a watch (None: listed on every pass)
        self.metrics = metrics or ReconcileMetrics()
        self.recorder = recorder or EventRecorder(self.cluster)
        self.is_leader = is_leader
        self.now = now
        self.repository_label = repository_label_value(namespace, name)
        self.options = replace(render_options or RenderOptions(), repository=self.repository_label)
        self.git = RepositoryGit(
            self.cluster,
            namespace,
            cache_dir=Path(cache_dir),
            access=git_access or GitAccess(),
            attempts=git_attempts,
        )
        self.writes = ClusterWrites(
            self.cluster,
            self.repository_label,
            scheduler_namespace=self.options.namespace,
            is_leader=is_leader,
            on_node_write=node_cache.expect if node_cache is not None else None,
        )
        self.status_writer = StatusPatcher(self.cluster, POLICY_REPOSITORY, owned=OWNED_CONDITIONS)
        # offboarding: the finalizer, and what the way out releases once the object is deleted
        self.release = Release(
            self.cluster,
            namespace,
            name,
            options=self.options,
            writes=self.writes,
            record=self.recorder.record,
            is_leader=is_leader,
            now=now,
        )
        self._forget()
        self.audit = AuditTrail(
            f"{namespace}/{name}",
            now=now,
            is_leader=is_leader,
            flush_seconds=audit_flush_seconds,
            open_commit=self.git.commit_back,
            warn=self.recorder.warning,
            rejected=self.metrics.commit_back_rejected.labels(name).inc,
        )

    def _forget(self) -> None:
        """What a new reconciler knows of earlier passes: nothing but empty caches."""
        self.last_rebalance = RebalanceResult()
        self.last_sync: SyncResult | None = None
        self.last_plan: RolloutPlan | None = None
        self.last_policy: PolicySet | None = None  # the policy of the last applied revision
        self.last_spec: PolicyRepositorySpec | None = None  # the spec the last reconcile validated
        self.last_read: KubeObject | None = None  # the PolicyRepository as the last reconcile read it
        self._inventory_doc: dict[str, Any] | None = None  # the GPUInventory of the last build
        self._snapshot_hash: str | None = None
        # pure work kept for an unchanged revision and inventory (kgwe.reconcile.memo): loaded revisions by
        # (commit, policy path) — the one to apply and the last good one —, and the last desired state
        self._loads: Memo[Loaded] = Memo(2)
        self._desired: Memo[tuple[PolicySet, Desired]] = Memo(1)
        self._inventories: Memo[Inventory] = Memo(1)  # by the node facts and live configs it was read from
        # the audit trail: each converged commit's stamp (by commit, policy path, reports path)
        self._stamps: Memo[Stamp] = Memo(2)

    def interval_seconds(self) -> float:
        """How long until the repository is looked at again: its spec.interval, as the last pass read it."""
        spec = self.last_spec
        if spec is None and self.last_read is not None:  # a deleted repository's way out: its own spec
            try:
                spec = read_spec(self.last_read)
            except InvalidSpec:
                spec = None
        return spec.interval_seconds if spec is not None else INVALID_SPEC_INTERVAL_SECONDS

    @property
    def status_writes(self) -> int:
        """PolicyRepository status patches (a no-op reconcile makes none)."""
        return self.status_writer.writes

    @property
    def plans_computed(self) -> int:
        """How many times the desired state was planned and rendered (not taken from the last reconcile)."""
        return self._desired.misses

    def read(self) -> KubeObject | None:
        return self.cluster.get(POLICY_REPOSITORY, self.name, self.namespace)

    def view(self, repo: Mapping[str, Any]) -> RepositoryView:
        """This repository as the cost duties see it: plain data and what they may do with it."""
        return RepositoryView(
            name=self.name,
            obj=repo,
            policy=self.last_policy,
            spec=self.last_spec,
            record=lambda kind, reason, message: self.recorder.record(repo, kind, reason, message),
            commit_back=self.git.commit_back,
            is_leader=self.is_leader,
        )

    # -- the pass ----------------------------------------------------------------------------------------
    def reconcile(self, *, pushed: bool = False) -> Outcome | None:
        """One full pass; returns what happened (None when the object is gone or suspended). `pushed`: a
        webhook push named the repository, so its ref moved."""
        repo = self.last_read = self.read()
        if repo is None:
            return None
        if deleting(repo):  # offboarding instead of the pass (kgwe.reconcile.release_step)
            return self._release(repo)
        self.release.ensure_finalizer(repo)
        started = time.monotonic()
        self.last_spec = None
        try:
            spec = self.last_spec = read_spec(repo)
        except InvalidSpec as exc:
            outcome = Outcome("spec_invalid", str(exc))
            ready = condition(repo.get("status"), "Ready")
            if (ready or {}).get("message") != outcome.message:  # one Event per new problem, not one per pass
                self.recorder.warning(repo, "InvalidSpec", outcome.message)
            return self._status(repo, outcome)
        if spec.suspend:
            return None
        try:
            with tracing.span("kgwe.reconcile", **{"kgwe.repository": f"{self.namespace}/{self.name}"}):
                outcome = self._steps(Pass(repo, spec, self.last_rebalance, pushed=pushed))
        except NotLeader:
            self.metrics.results.labels(self.name, "not_leader").inc()
            return None
        except Exception as exc:  # status must tell the truth whatever went wrong
            outcome = Outcome("apply_failed", f"reconcile failed: {_failure_text(exc, self)}")
            self.recorder.warning(repo, "ReconciliationFailed", outcome.message)
        self.metrics.duration.labels(self.name).observe(time.monotonic() - started)
        return self._status(repo, outcome)

    def flush_audit(self) -> bool:
        """Commit the audit entries that wait, now, with KGWE's state of the log to the status (the controller
        stops: they would be lost with this process). False when none waited or this replica cannot (not the
        leader, no valid spec seen, the repository gone or being deleted)."""
        spec = self.last_spec
        if spec is None or spec.reports is None or not self.is_leader() or not self.audit.waiting():
            return False
        repo = self.read()
        if repo is None or deleting(repo):
            return False
        p = Pass(repo, spec, self.last_rebalance)
        self.audit.commit(p, due=True)
        if p.audit_log:
            self.status_writer.write(repo, {**(repo.get("status") or {}), **p.audit_log})
        return True

    def _release(self, repo: KubeObject) -> Outcome | None:
        """One pass of the way out; its status, or None once the finalizer is gone. A deleted repository's
        policy is no longer in force: no cost report or budget team is taken from it any more."""
        self.last_policy = self.last_spec = None
        try:
            outcome = self.release.step(repo)
        except NotLeader:
            return None
        except Exception as exc:  # status must tell the truth whatever went wrong
            outcome = Outcome("release_failed", f"releasing failed: {_failure_text(exc, self)}")
        return self._status(repo, outcome) if outcome is not None else None

    def _steps(self, p: Pass) -> Outcome:
        source = self._fetch(p)
        if source is None:
            return summarize(p)
        self._validate(p, source)
        if p.errors:
            self._keep_last_good(p, source)
            self.audit.add(p, self.writes.node_changes())
            self.audit.commit(p)
            return summarize(p)
        assert p.policy is not None and p.revision is not None
        self._converge(p, p.policy, source, p.revision)
        assert p.sync is not None and p.plan is not None
        self._events(p, p.sync, p.plan)
        if not p.sync.failed:
            self._in_force(p.policy)
            p.scheduler = self._restart_scheduler(p)
        self.audit.add(p, self.writes.node_changes())
        if not p.sync.failed and p.scheduler is not None and p.scheduler.outcome != "invalid":
            self.metrics.set_last_applied(self.name, p.revision)
            if health(p.plan, p.revision)[0] == "ready":
                p.snapshot = self._commit_snapshot(p)
        self.audit.commit(p)
        return summarize(p)

    # -- fetch, validate ---------------------------------------------------------------------------------
    def _fetch(self, p: Pass) -> GitSource | None:
        """Resolve the tracked ref (fetching only what moved); None when Git failed (a Warning says why)."""
        try:
            with tracing.span("kgwe.reconcile.fetch"):
                source = self.git.source(p.spec)
                p.revision = str(source.fetch(moved=p.pushed))
        except (GitSourceError, UnsafeGitArgument) as exc:  # a refused target or credentials binding too
            self.recorder.warning(p.repo, "GitOperationFailed", str(exc))
            p.fetch_error = str(exc)
            return None
        return source

    def _validate(self, p: Pass, source: GitSource) -> None:
        assert p.revision is not None
        with tracing.span("kgwe.reconcile.validate", **{"kgwe.revision": p.revision}):
            p.policy, p.errors = self._load(source, Revision.sha_of(p.revision), p.spec)
        if p.errors:
            p.policy = None
            if p.status.get("lastAttemptedRevision") != p.revision:
                self.recorder.warning(p.repo, "ValidationFailed", summarize(p).message)
        elif p.policy is not None and p.status.get("lastAppliedRevision") == p.revision:
            self._in_force(p.policy)  # already applied: in force before this pass converges it again

    def _keep_last_good(self, p: Pass, source: GitSource) -> None:
        """An invalid revision: keep the last applied one converging (rollouts in flight, drift)."""
        last = p.status.get("lastAppliedRevision")
        if not last:
            return
        good, errors = self._load(source, Revision.sha_of(last), p.spec)
        if good is not None and not errors:
            self._in_force(good)
            self._converge(p, good, source, last)

    def _load(self, source: GitSource, sha: str, spec: PolicyRepositorySpec) -> Loaded:
        """The revision's PolicySet and its errors; a commit's content never changes, so each (commit,
        policy path) is loaded and validated once (an export that failed is tried again next time)."""
        return self._loads.get(
            (sha, spec.policy_path),
            lambda: self._load_revision(source, sha, spec),
            keep=lambda loaded: loaded[0] is not None,
        )

    def _load_revision(self, source: GitSource, sha: str, spec: PolicyRepositorySpec) -> Loaded:
        from kgwe.policy.loader import load_repository

        with tempfile.TemporaryDirectory(prefix="kgwe-rev-") as tmp:
            try:
                root = source.export(sha, Path(tmp), spec.policy_path or None)
            except KgweError as exc:
                return None, [str(exc)]
            ps = load_repository(root)
        return ps, error_lines(ps.errors)

    def _in_force(self, policy: PolicySet) -> None:
        self.last_policy = policy
        if self.on_policy_in_force is not None:
            self.on_policy_in_force(policy)

    # -- observe, build, apply, rollout ----------------------------------------------------------------
    def _converge(self, p: Pass, policy: PolicySet, source: GitSource, revision: str) -> None:
        """Observe, build, apply and roll out `policy` (of `revision`: the pass's, or the last good one),
        every write stamped with the commit that last changed the policy up to `revision`."""
        p.converged, p.stamp = revision, self._stamp(source, revision, p.spec)
        self.writes.begin(p.stamp)
        with collector_held():
            self._observe_to_rollout(p, policy)

    def _observe_to_rollout(self, p: Pass, policy: PolicySet) -> None:
        """The steps of `_converge` that read the fleet and write to it."""
        with tracing.span("kgwe.reconcile.observe"):
            observed = self._observe()
        p.rebalance = self._rebalance(p, policy, observed)
        with tracing.span("kgwe.reconcile.plan_render", **{"kgwe.nodes": len(observed.facts)}):
            desired = self.desired(policy, observed.facts, p.rebalance)
            objects = desired.objects + self._quotas(p, policy, observed)
        self._inventory_doc = desired.inventory_doc
        previous = [ObjectRef.from_status(e) for e in p.status.get("inventory") or []]
        with tracing.span("kgwe.reconcile.diff_apply", **{"kgwe.objects": len(objects)}):
            p.sync = sync = self.writes.apply(objects, previous)
        self.metrics.applied.labels(self.name).inc(len(sync.applied))
        self.metrics.pruned.labels(self.name).inc(len(sync.pruned))
        self.metrics.drift.labels(self.name).inc(len(sync.drift_corrected))
        if sync.failed:  # never relabel nodes for a config the cluster did not accept
            p.plan = plan_rollout([], desired.pools, self.now())
        else:
            with tracing.span("kgwe.reconcile.rollout_wave"):
                p.plan = self._rollout(p, policy, desired, observed.facts, observed.pods)
        self.metrics.writes.labels(self.name).inc(self.writes.taken())
        self.last_sync, self.last_plan = sync, p.plan

    def _stamp(self, source: GitSource, revision: str, spec: PolicyRepositorySpec) -> Stamp:
        """The commit that last changed the policy (outside the reports path) up to `revision`, and its
        author; read once per (commit, policy path, reports path)."""
        sha = Revision.sha_of(revision)
        ref = revision.rsplit("@sha1:", 1)[0] if "@sha1:" in revision else ""

        def read() -> Stamp:
            commit, name, email = source.last_change(sha, spec.policy_path, spec.reports_path)
            return Stamp.of(ref, commit or sha, name, email)

        return self._stamps.get((sha, spec.policy_path, spec.reports_path), read)

    def _observe(self) -> Observed:
        """The GPU nodes (from the node cache once it shows every node patch this process made, else
        listed) and the live pods."""
        nodes = self.node_cache.nodes(CACHE_WAIT_SECONDS) if self.node_cache is not None else None
        if nodes is None:
            nodes = self.cluster.list(NODE, labels=GPU_NODE_SELECTOR)
        pods = self.cluster.list(POD, fields=LIVE_PODS)
        facts = facts_from_objects(nodes, gpu_pods_on_nodes(pods))
        return Observed(facts, pods, [p for p in pods if not (p.get("spec") or {}).get("nodeName")])

    def desired(
        self, policy: PolicySet, facts: list[GpuNodeFacts], rebalance: RebalanceResult | None = None
    ) -> Desired:
        """What the cluster should hold for `policy` on the nodes `facts`, budget quotas aside. Planned and
        rendered again only when the policy, a node fact or the live mig-parted configs changed
        (kgwe.reconcile.memo)."""
        live_configs = self._live_mig_configs(self.options.mig_namespace, self.options.mig_config_name)
        sharing_named = named_sharing_configs(
            self.cluster, self.options.mig_namespace, self.options.device_plugin_config_name, facts
        )
        records = (rebalance or RebalanceResult()).records
        targets = {p: (r.rollout_revision(), r.target, r.nodes, r.grow) for p, r in records.items()}
        nodes_key, inventory = self._inventory(facts, live_configs)
        key = (id(policy), fingerprint(nodes_key, self.options, sharing_named, targets))
        # the value holds `policy`, so its id cannot be reused by another PolicySet while the key is kept
        held, computed = self._desired.get(
            key,
            lambda: (
                policy,
                build_desired(policy, facts, inventory, self.options, live_configs, sharing_named, records),
            ),
        )
        assert held is policy
        return computed

    def _inventory(self, facts: list[GpuNodeFacts], live_configs: MigConfigs) -> tuple[str, Inventory]:
        """The key of the GPU nodes as planning reads them (kgwe.reconcile.memo) and their inventory, read
        again only when that key changed: a new policy on the same nodes plans on the inventory kept."""
        nodes_key = fingerprint(self.name, planned_facts(facts), live_configs)
        return nodes_key, self._inventories.get(
            nodes_key, lambda: read_inventory(facts, live_configs, self.name)
        )

    def _quotas(self, p: Pass, policy: PolicySet, observed: Observed) -> list[dict[str, Any]]:
        """The budget quotas, capped where an Enforce budget is exhausted (the caps are this pass's)."""
        caps: QuotaCaps = {}
        if self.budget_caps is not None:
            caps = self.budget_caps(self.name, policy, observed.pods, self._recorder(p))
        rendered = budget_quotas(policy, self.options, caps)
        quotas = rendered.objects if rendered is not None else []
        p.quota_caps, p.quotas = caps, quotas
        return quotas

    def _live_mig_configs(self, namespace: str, name: str) -> MigConfigs:
        return live_mig_configs(self.cluster, namespace, name)

    def _rollout(
        self, p: Pass, policy: PolicySet, desired: Desired, facts: list[GpuNodeFacts], pods: list[KubeObject]
    ) -> RolloutPlan:
        """The MIG and the sharing rollout, side by side; the rollout gauges as they stand after them."""
        now, record = self.now(), self._recorder(p)
        mig = run_mig_rollout(self.writes.mig_nodes, desired, facts, now, record)
        plugins = device_plugin_states(
            [
                q
                for q in pods
                if ((q.get("metadata") or {}).get("labels") or {}).get("app") == DEVICE_PLUGIN_DAEMONSET
            ]
        )
        sharing = run_sharing_rollout(
            self.writes.sharing_nodes,
            policy.sharing_strategies,
            facts,
            now,
            record=record,
            device_plugins=plugins,
        )
        self.metrics.set_node_pools(self.name, desired.node_pool)
        for pool, progress in mig.pools.items():
            self.metrics.rollout_pending.labels(self.name, pool).set(
                len(progress.pending) + len(progress.waiting_busy)
            )
            self.metrics.rollout_in_progress.labels(self.name, pool).set(
                len(progress.in_progress) + len(progress.draining)
            )
            self.metrics.rollout_failed.labels(self.name, pool).set(
                len(progress.failed) + len(progress.timed_out)
            )
        return merge_plans(mig, sharing)

    def _recorder(self, p: Pass) -> Callable[[str, str, str], None]:
        """Events about the repository in this pass: once a commit is converged, each names it and its
        author in its text and carries its stamp as annotations."""

        def record(kind: str, reason: str, message: str) -> None:
            if p.stamp is None:
                self.recorder.record(p.repo, kind, reason, message)
                return
            suffix = f" (policy {p.stamp.revision} by {p.stamp.author})"
            text = message[: MAX_MESSAGE_CHARS - len(suffix)] + suffix
            self.recorder.record(p.repo, kind, reason, text, p.stamp.annotations())

        return record

    # -- MIG rebalancing ---------------------------------------------------------------------------------
    def _rebalance(self, p: Pass, policy: PolicySet, observed: Observed) -> RebalanceResult:
        """Measure demand and decide for every rebalancing pool (kgwe.reconcile.rebalancing); the records
        in force otherwise. Reads the inventory only when some pool's evaluation is due."""
        chosen = rebalancing_strategies(policy.mig_strategies)
        now = self.now()
        revisions = {s.name: rollout_revision(s) for s in chosen}
        held = records_in_force(chosen, p.status, observed.unscheduled, now, revisions) if chosen else None
        if not chosen or held is not None:
            self.last_rebalance = held or RebalanceResult()
            return self.last_rebalance
        configs = self._live_mig_configs(self.options.mig_namespace, self.options.mig_config_name)
        result = rebalance(
            chosen,
            self._inventory(observed.facts, configs)[1].model,
            observed.facts,
            observed.unscheduled,
            p.status,
            now,
            revisions=revisions,
            read_activity=self.read_activity,
            outlooks=self.mig_outlooks,
        )
        for pool, decision in sorted(result.taken.items()):
            self._recorder(p)("Normal", "MIGRebalance", f"pool {pool}: {decision.event}")
            self.metrics.rebalances.labels(self.name, pool).inc()
        was = status_of(p.status.get("conditions"), UTILIZATION_CONDITION)
        if result.condition and result.condition.status == "False" and was != "False":
            self.recorder.warning(p.repo, result.condition.reason or "", result.condition.message or "")
        self.last_rebalance = result
        return result

    # -- health, status ----------------------------------------------------------------------------------
    def _restart_scheduler(self, p: Pass) -> SchedulerSync:
        """Roll the kgwe-scheduler Deployment onto the applied configuration when it changed."""
        result = self.writes.restart_scheduler()
        self.metrics.writes.labels(self.name).inc(self.writes.taken())
        if result.outcome == "restarted":
            self._recorder(p)("Normal", "SchedulerRestarted", result.message)
        elif result.outcome == "invalid":
            self.recorder.warning(p.repo, "SchedulerConfigInvalid", result.message)
        return result

    def _events(self, p: Pass, sync: SyncResult, plan: RolloutPlan) -> None:
        record = self._recorder(p)
        if sync.created or sync.updated:
            record(
                "Normal",
                "Applied",
                f"revision {p.revision}: {len(sync.created)} created, "
                f"{len(sync.updated)} updated ({len(sync.drift_corrected)} drift corrected)",
            )
        if sync.pruned:
            record("Normal", "Pruned", "pruned " + ", ".join(str(r) for r in sync.pruned))
        for progress in plan.stalled:
            record("Warning", "RolloutStalled", progress.message())

    def _status(self, repo: KubeObject, outcome: Outcome) -> Outcome:
        """Count the outcome and write the status it leads to, unless that is the live one."""
        self.metrics.results.labels(self.name, outcome.phase).inc()
        current = repo.get("status") or {}
        generation = (repo.get("metadata") or {}).get("generation")
        new = next_status(current, outcome, generation=generation, now=self.now())
        if self.is_leader():
            self.status_writer.write(repo, new)
        return outcome

    def _commit_snapshot(self, p: Pass) -> dict[str, Any]:
        """Commit the GPUInventory snapshot under the reports path (for offline `kgwe plan` in CI)."""
        doc = self._inventory_doc
        if p.spec.reports is None or doc is None:
            return {}
        if self.last_rebalance.records:  # for `kgwe plan`'s preview of the next rebalance
            doc = {**doc, "spec": {**doc["spec"], "migDemand": snapshot_demand(self.last_rebalance.records)}}
        digest = fingerprint(doc)  # no YAML dump of a fleet's inventory when it is unchanged
        if digest == self._snapshot_hash:
            return {}
        try:
            cb = self.git.commit_back(p.spec, "commit-back")
        except GitSourceError as exc:
            self.recorder.warning(p.repo, "CommitBackRejected", str(exc))
            return {"reportsStatus": {"lastPushError": str(exc)}}
        text = yaml.safe_dump(doc, sort_keys=False)
        snapshot: dict[str, Content] = {f"{p.spec.reports_path}/gpu-inventory.yaml": text}
        audit = self.audit.files(p, due=True)
        if audit:  # the audit log goes out with the snapshot; refused, the snapshot goes out alone
            result = cb.commit_files({**snapshot, **audit}, summary="GPU inventory snapshot and audit log")
            self.audit.done(p, result)  # a Warning when refused
        if not audit or result.status == "rejected":
            result = cb.commit_files(snapshot, summary="GPU inventory snapshot")
        self._snapshot_hash = digest  # also after a permanent rejection: never retry the same content
        if result.status == "rejected":
            self.metrics.commit_back_rejected.labels(self.name).inc()
            self.recorder.warning(p.repo, "CommitBackRejected", result.reason)
            return {"reportsStatus": {"lastPushError": result.reason}}
        if result.status == "failed":
            self._snapshot_hash = None
            return {}
        if result.status == "pushed":  # None removes an earlier error (merge patch)
            return {"reportsStatus": {"lastPushedCommit": result.sha, "lastPushError": None}}
        return {}


def _failure_text(exc: Exception, rec: RepositoryReconciler) -> str:
    if isinstance(exc, ApiException):
        return str(exc.reason)
    if isinstance(exc, KgweError):
        return str(exc)
    log.exception("reconcile of %s/%s failed", rec.namespace, rec.name)
    return f"{type(exc).__name__}: {exc}"


def live_mig_configs(cluster: Cluster, namespace: str, name: str) -> MigConfigs:
    """The `mig-configs` of KGWE's mig-parted ConfigMap as it is in the cluster ({} when absent)."""
    cm = cluster.get(CONFIG_MAP, name, namespace)
    return mig_configs_of((cm or {}).get("data") or {})
