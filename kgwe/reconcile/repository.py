"""Reconcile one PolicyRepository: Git revision → load+validate → cluster inventory → plan+render → SSA
diff/apply → prune → safe MIG rollout → status, Events, metrics, inventory snapshot committed back.

What is kept between reconciles is only a cache (the Git mirror, the last snapshot hash, the loaded
revisions and the last desired state under keys covering all their inputs — kgwe.reconcile.memo):
everything that matters — the applied inventory, the revisions, where each node's MIG rollout stands — is
read back from the cluster, so any replica that becomes leader continues exactly where the previous one
stopped.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe import API_GROUP
from kgwe.cluster.apply import Applier, NotLeader, ObjectRef, SyncResult
from kgwe.cluster.events import EventRecorder
from kgwe.cluster.inventory import (
    GpuNodeFacts,
    config_layout,
    inventory_document,
    read_gpu_nodes_and_unscheduled,
)
from kgwe.cluster.names import (
    BUDGET_QUOTA_NAME,
    CRD_VERSION,
    FIELD_MANAGER,
    GIT_CREDENTIALS_LABEL,
    GIT_HOSTS_ANNOTATION,
    POLICY_REPOSITORY_PLURAL,
    RETRY_ANNOTATION,
    repository_label_value,
)
from kgwe.cluster.nodes import NodeOps
from kgwe.errors import KgweError
from kgwe.gitops.auth import GitCredentials, is_ssh_url, parse_hosts
from kgwe.gitops.commit_back import CommitBack
from kgwe.gitops.gitcmd import GitAccess, UnsafeGitArgument, url_origin
from kgwe.gitops.source import GitRef, GitSource, GitSourceError, Revision
from kgwe.observability import tracing
from kgwe.policy.cluster_kinds import PolicyRepositorySpec
from kgwe.reconcile.memo import Memo, fingerprint, planned_facts
from kgwe.reconcile.metrics import ReconcileMetrics
from kgwe.reconcile.rebalancing import ActivityReader, RebalanceResult
from kgwe.reconcile.rollout import (
    Action,
    NodeState,
    PoolPolicy,
    RolloutPlan,
    apply_actions,
    plan_rollout,
)
from kgwe.reconcile.scheduler_restart import SchedulerRestarter, SchedulerSync
from kgwe.reconcile.sharing_rollout import merge as merge_plans
from kgwe.reconcile.sharing_rollout import named_sharing_configs, run_sharing_rollout
from kgwe.reconcile.status import Outcome, next_status

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = API_GROUP, CRD_VERSION, POLICY_REPOSITORY_PLURAL
DEFAULT_PENDING_TIMEOUT_SECONDS = 900.0
MAX_ERRORS_IN_MESSAGE = 5
NODE_WORKERS = 8


@dataclass(frozen=True)
class Desired:
    objects: list[dict]  # everything to server-side apply (no Node objects: nodes go through the rollout)
    node_configs: dict[str, str]  # node -> mig-parted config name
    pools: dict[str, PoolPolicy]
    node_pool: dict[str, str]
    inventory_doc: dict
    mig_configs: dict  # config name -> mig-parted entries, as rendered (plus the live ones)
    revisions: dict[str, str] = field(default_factory=dict)  # pool -> rollout revision (strategy digest)


class InvalidSpec(KgweError):
    """The PolicyRepository's spec does not validate; the message names the field path."""


def read_spec(repo: Mapping) -> PolicyRepositorySpec:
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


def max_unavailable_value(value: Any) -> int | str:
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal | float):
        return f"{value}%"
    return str(value)


class RepositoryReconciler:
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        name: str,
        *,
        cache_dir: Path,
        metrics: ReconcileMetrics | None = None,
        recorder: EventRecorder | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        git_attempts: int = 3,
        git_access: GitAccess | None = None,
        render_options: Any = None,
        read_activity: ActivityReader | None = None,
    ) -> None:
        self.api_client = api_client
        self.read_activity = read_activity  # dcgm-exporter engine activity per pod (None: no Prometheus)
        self.last_rebalance = RebalanceResult()
        self.git_access = git_access or GitAccess()
        self.render_options = render_options  # a RenderOptions base (extender URL, TLS); None: defaults
        self.namespace = namespace
        self.name = name
        self.cache_dir = Path(cache_dir)
        self.metrics = metrics or ReconcileMetrics()
        self.recorder = recorder or EventRecorder(api_client)
        self.is_leader = is_leader
        self.now = now
        self.git_attempts = git_attempts
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.repository_label = repository_label_value(namespace, name)
        self._sources: dict[tuple, GitSource] = {}
        self._snapshot_hash: str | None = None
        self.last_sync: SyncResult | None = None
        self.last_policy: Any = None  # the PolicySet of the last applied revision (cost duties read it)
        self.last_spec: PolicyRepositorySpec | None = None  # the spec the last reconcile validated
        # namespace -> ResourceQuota spec.hard replacing the rendered `kgwe-budget` (a budget's Enforce cap)
        self.quota_overrides: dict[str, dict[str, str]] = {}
        self.status_writes = 0  # PolicyRepository status patches (a no-op reconcile makes none)
        self._applier: Applier | None = None
        self.last_plan: RolloutPlan | None = None
        self._scheduler: SchedulerRestarter | None = None
        # pure work kept for an unchanged revision and inventory (kgwe.reconcile.memo): loaded revisions by
        # (commit, policy path) — the one to apply and the last good one —, and the last desired state
        self._loads: Memo[tuple[Any, list[str]]] = Memo(2)
        self._desired: Memo[tuple[Any, Desired]] = Memo(1)

    @property
    def plans_computed(self) -> int:
        """How many times the desired state was planned and rendered (not taken from the last reconcile)."""
        return self._desired.misses

    # -- reading ---------------------------------------------------------------------------------
    def read(self) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def git_credentials(self, spec: PolicyRepositorySpec) -> GitCredentials | None:
        """The repository's Git credentials: only from a Secret that opts in with GIT_CREDENTIALS_LABEL;
        the controller's own environment only when its operator allowed it (GitAccess)."""
        ssh = is_ssh_url(spec.url)
        if spec.secret_ref is None:
            if ssh:
                raise GitSourceError(
                    "an SSH URL needs spec.secretRef naming a Secret with identity and known_hosts"
                )
            if not self.git_access.credentials_from_env:
                return None
            local = GitCredentials.from_env()  # bound to the hosts in KGWE_GIT_HOSTS
            return local if local.secret else None
        name = spec.secret_ref.name
        try:
            secret = self.core.read_namespaced_secret(name, self.namespace)
        except ApiException as exc:
            raise GitSourceError(f"secret {self.namespace}/{name} for Git credentials: {exc.reason}") from exc
        labels = (secret.metadata.labels if secret.metadata else None) or {}
        if labels.get(GIT_CREDENTIALS_LABEL) != "true":
            raise GitSourceError(
                f'secret {self.namespace}/{name} is not labelled {GIT_CREDENTIALS_LABEL}="true"; a '
                "PolicyRepository may only use Secrets that opt in to being Git credentials"
            )
        annotations = (secret.metadata.annotations if secret.metadata else None) or {}
        try:
            hosts = parse_hosts(annotations.get(GIT_HOSTS_ANNOTATION, ""))
        except ValueError as exc:
            raise GitSourceError(f"secret {self.namespace}/{name}: {GIT_HOSTS_ANNOTATION}: {exc}") from None
        if not hosts:
            raise GitSourceError(
                f"secret {self.namespace}/{name} names no host in its {GIT_HOSTS_ANNOTATION} annotation; "
                "Git credentials are sent only to the hosts they are bound to"
            )
        creds = replace(GitCredentials.from_secret_data(secret.data or {}), hosts=hosts)
        try:
            creds.check_bound(url_origin(spec.url))
        except UnsafeGitArgument as exc:
            raise GitSourceError(f"secret {self.namespace}/{name}: {exc}") from None
        if ssh and not creds.ssh_known_hosts:
            raise GitSourceError(
                f"secret {self.namespace}/{name} has no known_hosts: SSH host keys are never trusted on "
                "first use"
            )
        return creds

    def _source(self, spec: PolicyRepositorySpec) -> GitSource:
        ref = GitRef.from_model(spec.ref)
        key = (spec.url, ref, spec.timeout_seconds)
        source = self._sources.get(key)
        if source is None:
            source = GitSource(
                spec.url,
                ref,
                cache_dir=self.cache_dir / "git",
                timeout_seconds=spec.timeout_seconds,
                attempts=self.git_attempts,
                allow_local=self.git_access.allow_local_urls,
                ca_file=self.git_access.ca_file,
                allowed_networks=self.git_access.allowed_networks,
            )
            self._sources = {key: source}
        source.credentials = self.git_credentials(spec)
        return source

    def commit_back(self, spec: PolicyRepositorySpec, workdir_name: str) -> CommitBack:
        """A CommitBack to the repository's reports branch that may write only under spec.reports.path."""
        return CommitBack(
            spec.url,
            spec.reports_branch,
            workdir=self.cache_dir / workdir_name,
            credentials=self.git_credentials(spec),
            allowed_prefixes=(spec.reports_path,),
            timeout_seconds=spec.timeout_seconds,
            allow_local=self.git_access.allow_local_urls,
            ca_file=self.git_access.ca_file,
            allowed_networks=self.git_access.allowed_networks,
        )

    # -- the reconcile -----------------------------------------------------------------------------
    def reconcile(self) -> Outcome | None:
        """One full pass; returns what happened (None when the object is gone or suspended)."""
        repo = self.read()
        if repo is None:
            return None
        started = time.monotonic()
        self.last_spec = None
        try:
            spec = read_spec(repo)
            self.last_spec = spec
        except InvalidSpec as exc:
            outcome = Outcome("spec_invalid", str(exc))
            if _ready_message(repo) != outcome.message:  # one Event per new problem, not one per pass
                self.recorder.warning(repo, "InvalidSpec", outcome.message)
            self.metrics.results.labels(self.name, outcome.phase).inc()
            self._write_status(repo, outcome)
            return outcome
        if spec.suspend:
            return None
        try:
            with tracing.span("kgwe.reconcile", **{"kgwe.repository": f"{self.namespace}/{self.name}"}):
                outcome = self._reconcile(repo, spec)
        except NotLeader:
            self.metrics.results.labels(self.name, "not_leader").inc()
            return None
        except Exception as exc:  # status must tell the truth whatever went wrong
            if isinstance(exc, ApiException):
                text = exc.reason
            elif isinstance(exc, KgweError):
                text = str(exc)
            else:
                log.exception("reconcile of %s/%s failed", self.namespace, self.name)
                text = f"{type(exc).__name__}: {exc}"
            outcome = Outcome("apply_failed", f"reconcile failed: {text}")
            self.recorder.warning(repo, "ReconciliationFailed", outcome.message)
        self.metrics.duration.labels(self.name).observe(time.monotonic() - started)
        self.metrics.results.labels(self.name, outcome.phase).inc()
        self._write_status(repo, outcome)
        return outcome

    def _reconcile(self, repo: dict, spec: PolicyRepositorySpec) -> Outcome:
        status = repo.get("status") or {}
        try:
            with tracing.span("kgwe.reconcile.fetch"):
                source = self._source(spec)
                revision = source.fetch()
        except (GitSourceError, UnsafeGitArgument) as exc:  # a refused target or credentials binding too
            self.recorder.warning(repo, "GitOperationFailed", str(exc))
            return Outcome("fetch_failed", str(exc))
        last_applied = status.get("lastAppliedRevision")
        with tracing.span("kgwe.reconcile.validate", **{"kgwe.revision": str(revision)}):
            ps, errors = self._load(source, revision.sha, spec)
        if errors:
            message = (
                f"revision {revision} is invalid, nothing applied; last applied revision "
                f"{last_applied or '(none)'} stays in force: " + "; ".join(errors)
            )
            if status.get("lastAttemptedRevision") != str(revision):
                self.recorder.warning(repo, "ValidationFailed", message)
            rollout = None
            extra: dict[str, Any] = {}
            if last_applied:  # keep the last good state converging (rollouts in flight, drift)
                good, good_errors = self._load(source, Revision.sha_of(last_applied), spec)
                if not good_errors:
                    _, plan = self._converge(repo, good, status)
                    rollout = {p: pr.as_status() for p, pr in plan.pools.items()}
                    extra = self._rebalance_status(status)
            return Outcome(
                "invalid",
                message,
                attempted_revision=str(revision),
                rollout=rollout,
                extra=extra,
                conditions=self._extra_conditions(),
            )

        sync, plan = self._converge(repo, ps, status)
        rebalance = self._rebalance_status(status)
        if not sync.failed:
            self.last_policy = ps
        inventory = [r.as_status() for r in sorted(set(sync.applied + sync.unchanged))]
        # Objects the API refused stay in the inventory so a later success or prune still sees them.
        inventory += [r.as_status() for r, _ in sync.failed if r.as_status() not in inventory]
        rollout = {p: pr.as_status() for p, pr in plan.pools.items()}
        self._events(repo, revision, status, sync, plan)
        if sync.failed:
            msg = "; ".join(f"{ref}: {why}" for ref, why in sync.failed[:MAX_ERRORS_IN_MESSAGE])
            return Outcome(
                "apply_failed",
                f"applying revision {revision} failed for {msg}",
                attempted_revision=str(revision),
                inventory=inventory,
                rollout=rollout,
                extra=rebalance,
                conditions=self._extra_conditions(),
            )
        scheduler = self._restart_scheduler(repo)
        if scheduler.outcome == "invalid":  # everything else is applied; the scheduler keeps running
            return Outcome(
                "scheduler_invalid",
                f"revision {revision} applied except the scheduler restart: {scheduler.message}",
                attempted_revision=str(revision),
                inventory=inventory,
                rollout=rollout,
                extra=rebalance,
                conditions=self._extra_conditions(),
            )
        self.metrics.set_last_applied(self.name, str(revision))
        stalled = plan.stalled
        if stalled:
            phase, message = "stalled", "; ".join(p.message() for p in stalled)
        elif not all(p.complete for p in plan.pools.values()):
            phase = "progressing"
            message = f"revision {revision} applied; MIG rollout: " + "; ".join(
                p.message() for p in plan.pools.values() if not p.complete
            )
        else:
            phase, message = "ready", f"applied revision {revision}"
        extra = self._commit_snapshot(repo, spec, phase) if phase == "ready" else {}
        return Outcome(
            phase,
            message,
            attempted_revision=str(revision),
            applied_revision=str(revision),
            inventory=inventory,
            rollout=rollout,
            extra={**extra, **rebalance},
            conditions=self._extra_conditions(),
        )

    def _load(self, source: GitSource, sha: str, spec: PolicyRepositorySpec) -> tuple[Any, list[str]]:
        """The revision's PolicySet and its errors; a commit's content never changes, so each (commit,
        policy path) is loaded and validated once (an export that failed is tried again next time)."""
        return self._loads.get(
            (sha, spec.policy_path),
            lambda: self._load_revision(source, sha, spec),
            keep=lambda loaded: loaded[0] is not None,
        )

    def _load_revision(
        self, source: GitSource, sha: str, spec: PolicyRepositorySpec
    ) -> tuple[Any, list[str]]:
        from kgwe.policy.loader import load_repository

        path = spec.policy_path
        with tempfile.TemporaryDirectory(prefix="kgwe-rev-") as tmp:
            try:
                root = source.export(sha, Path(tmp), path or None)
            except KgweError as exc:
                return None, [str(exc)]
            ps = load_repository(root)
        errors = [
            f"{d.file}:{d.line}:{d.column}: {d.path + ': ' if d.path else ''}{d.message}" for d in ps.errors
        ]
        if len(errors) > MAX_ERRORS_IN_MESSAGE:
            errors = [*errors[:MAX_ERRORS_IN_MESSAGE], f"and {len(errors) - MAX_ERRORS_IN_MESSAGE} more"]
        return ps, errors

    # -- desired state -------------------------------------------------------------------------------
    def desired(
        self, ps: Any, facts: list[GpuNodeFacts], rebalance: RebalanceResult | None = None
    ) -> Desired:
        """What the cluster should hold for policy `ps` on the nodes `facts`. Planned and rendered again
        only when the policy, a node fact or the live mig-parted configs changed (kgwe.reconcile.memo);
        budget quota overrides change often and cost nothing, so they are applied after."""
        from kgwe.render.render import RenderOptions

        options = replace(self.render_options or RenderOptions(), repository=self.repository_label)
        live_configs = self._live_mig_configs(options.mig_namespace, options.mig_config_name)
        sharing_named = self._named_sharing_configs(options, facts)
        records = (rebalance or RebalanceResult()).records
        targets = {p: (r.rollout_revision(), r.target, r.nodes, r.grow) for p, r in records.items()}
        facts_key = planned_facts(facts)
        key = (id(ps), fingerprint(self.name, options, facts_key, live_configs, sharing_named, targets))
        # the value holds `ps`, so its id cannot be reused by another PolicySet while the key is kept
        held, computed = self._desired.get(
            key, lambda: (ps, self._plan_render(ps, facts, options, live_configs, sharing_named, records))
        )
        assert held is ps
        return replace(computed, objects=[self._with_quota_override(o) for o in computed.objects])

    def _plan_render(
        self,
        ps: Any,
        facts: list[GpuNodeFacts],
        options: Any,
        live_configs: dict,
        sharing_named: dict[str, str],
        records: Mapping[str, Any] | None = None,
    ) -> Desired:
        """Plan and render. `records`: the rebalancing record in force per pool (kgwe.planner.rebalance):
        its demand target is planned for, nodes changed under it are annotated with its revision, and once
        a decision was taken (epoch >= 1) only the nodes it named may change until the next one."""
        from kgwe.planner.from_policy import plan_layouts
        from kgwe.policy import GPUInventory
        from kgwe.render.render import render

        doc = inventory_document(facts, name=self.name, mig_configs=live_configs)
        inventory = GPUInventory.model_validate(doc)
        pools: dict[str, PoolPolicy] = {}
        selected: dict[str, str] = {}
        revisions: dict[str, str] = {}
        for strategy in sorted(ps.mig_strategies, key=lambda s: s.name):
            rollout = strategy.spec.rollout
            timeout = (
                rollout.pending_timeout.total_seconds()
                if rollout.pending_timeout
                else DEFAULT_PENDING_TIMEOUT_SECONDS
            )
            pools[strategy.name] = PoolPolicy(
                strategy.name, max_unavailable_value(rollout.max_unavailable), rollout.drain, timeout
            )
            record = (records or {}).get(strategy.name)
            revisions[strategy.name] = record.rollout_revision() if record else rollout_revision(strategy)
            for node in inventory.spec.nodes:
                if node.name not in selected and strategy.selects(node.labels):
                    selected[node.name] = strategy.name
        # A node already changed for its pool's current strategy keeps its layout: one change per revision.
        pinned = {
            f.name for f in facts if f.name in selected and f.rollout_revision == revisions[selected[f.name]]
        }
        decided = {p: r for p, r in (records or {}).items() if r.epoch > 0}
        pinned |= {n for n, p in selected.items() if p in decided and n not in decided[p].nodes}
        demand = {p: dict(r.target) for p, r in (records or {}).items() if r.target}
        fewest = {p for p, r in decided.items() if r.grow}  # plan as the decision did
        with tracing.span("kgwe.reconcile.plan"):
            layouts = plan_layouts(
                ps.mig_strategies, inventory, pinned=pinned, demand=demand, fewest_changes=fewest
            )
        # Every config a node's label names stays defined until no node names it (the MIG manager re-reads
        # it on any restart); the mig-parted ConfigMap is applied before any label points at a new config.
        named = {
            f.mig_config: live_configs[f.mig_config]
            for f in facts
            if f.mig_config and f.mig_config in live_configs
        }
        rendered = render(
            ps,
            inventory,
            options=options,
            layouts=layouts,
            keep_mig_configs=named,
            keep_sharing_configs=sharing_named,
        )
        objects = [o for o in rendered.objects if o.get("kind") != "Node"]
        node_pool = {n: pool for n, pool in selected.items() if n in rendered.node_configs}
        configs = dict(live_configs)
        configs.update(_rendered_mig_configs(objects, options.mig_namespace, options.mig_config_name))
        return Desired(objects, dict(rendered.node_configs), pools, node_pool, doc, configs, revisions)

    def _named_sharing_configs(self, options: Any, facts: list[GpuNodeFacts]) -> dict[str, str]:
        """Device-plugin configs nodes still name (a removed strategy's, until its nodes are back on
        `default`): the plugin's config-manager fails on a key the ConfigMap lacks."""
        return named_sharing_configs(
            self.core, options.mig_namespace, options.device_plugin_config_name, facts
        )

    def _with_quota_override(self, obj: dict) -> dict:
        """The rendered budget quota, capped while its budget is enforced (see kgwe.reconcile.costs)."""
        meta = obj.get("metadata") or {}
        hard = self.quota_overrides.get(meta.get("namespace", ""))
        if obj.get("kind") != "ResourceQuota" or meta.get("name") != BUDGET_QUOTA_NAME or hard is None:
            return obj
        return {**obj, "spec": {**obj.get("spec", {}), "hard": dict(hard)}}

    def _live_mig_configs(self, namespace: str, name: str) -> dict:
        return live_mig_configs(self.core, namespace, name)

    def _converge(self, repo: dict, ps: Any, status: Mapping) -> tuple[SyncResult, RolloutPlan]:
        facts, unscheduled = read_gpu_nodes_and_unscheduled(self.api_client)
        rebalance = self._rebalance(repo, ps, facts, unscheduled, status)
        with tracing.span("kgwe.reconcile.plan_render", **{"kgwe.nodes": len(facts)}):
            desired = self.desired(ps, facts, rebalance)
        self._last_inventory_doc = desired.inventory_doc
        previous = [ObjectRef.from_status(e) for e in status.get("inventory") or []]
        if self._applier is None:  # kept: its DynamicClient's API discovery is costly on a busy apiserver
            self._applier = Applier(self.api_client, self.repository_label, guard=self.is_leader)
        applier = self._applier
        with tracing.span("kgwe.reconcile.diff_apply", **{"kgwe.objects": len(desired.objects)}):
            sync = applier.sync(desired.objects, previous)
        self.metrics.applied.labels(self.name).inc(len(sync.applied))
        self.metrics.pruned.labels(self.name).inc(len(sync.pruned))
        self.metrics.drift.labels(self.name).inc(len(sync.drift_corrected))
        self.metrics.writes.labels(self.name).inc(sync.writes)
        if sync.failed:  # never relabel nodes for a config the cluster did not accept
            plan = plan_rollout([], desired.pools, self.now())
        else:
            with tracing.span("kgwe.reconcile.rollout_wave"):
                plan = merge_plans(
                    self._rollout(repo, desired, facts), self._sharing_rollout(repo, ps, facts)
                )
        self.last_sync, self.last_plan = sync, plan
        return sync, plan

    # -- MIG rebalancing ----------------------------------------------------------------------------
    def _rebalance(
        self, repo: dict, ps: Any, facts: list[GpuNodeFacts], unscheduled: list[dict], status: Mapping
    ) -> RebalanceResult:
        """Measure demand and decide for every rebalancing pool (kgwe.reconcile.rebalancing); the records
        in force otherwise. Reads the inventory only when some pool's evaluation is due."""
        from kgwe.planner.rebalance import Record, carry_over
        from kgwe.reconcile.rebalancing import (
            Condition,
            rebalance,
            rebalancing_strategies,
            unschedulable_profiles,
        )

        chosen = rebalancing_strategies(ps.mig_strategies)
        if not chosen:
            self.last_rebalance = RebalanceResult()
            return self.last_rebalance
        now = self.now()
        old = status.get("rebalance") or {}
        revisions = {s.name: rollout_revision(s) for s in chosen}
        stored = {s.name: Record.from_status(old.get(s.name)) for s in chosen}
        held = {s.name: carry_over(stored[s.name], revisions[s.name]) for s in chosen}
        seen = {p for r in held.values() for p, n in r.pending.items() if n > 0}
        due = bool(unschedulable_profiles(unscheduled) - seen) or any(
            (r := stored[s.name]) is None
            or r.revision != revisions[s.name]
            or r.evaluated_at is None
            or now - r.evaluated_at >= s.spec.partition_strategy.rebalance_interval
            for s in chosen
        )
        if not due:
            previous = next(
                (c for c in status.get("conditions") or [] if c.get("type") == "UtilizationAvailable"), None
            )
            condition = (
                Condition(previous["type"], previous["status"], previous["reason"], previous["message"])
                if previous
                else None
            )
            self.last_rebalance = RebalanceResult(records=held, condition=condition)
            return self.last_rebalance
        from kgwe.policy import GPUInventory
        from kgwe.render.render import RenderOptions

        options = self.render_options or RenderOptions()
        configs = self._live_mig_configs(options.mig_namespace, options.mig_config_name)
        inventory = GPUInventory.model_validate(
            inventory_document(facts, name=self.name, mig_configs=configs)
        )
        result = rebalance(
            chosen,
            inventory,
            facts,
            unscheduled,
            status,
            now,
            revisions=revisions,
            read_activity=self.read_activity,
        )
        for pool, decision in sorted(result.taken.items()):
            self.recorder.normal(repo, "MIGRebalance", f"pool {pool}: {decision.event}")
            self.metrics.rebalances.labels(self.name, pool).inc()
        previous_status = next(
            (
                c.get("status")
                for c in status.get("conditions") or []
                if c.get("type") == "UtilizationAvailable"
            ),
            None,
        )
        if result.condition and result.condition.status == "False" and previous_status != "False":
            self.recorder.warning(repo, result.condition.reason, result.condition.message)
        self.last_rebalance = result
        return result

    def _rebalance_status(self, status: Mapping) -> dict[str, Any]:
        """The status.rebalance to write (merge patch: a pool no longer rebalancing is removed with null)."""
        old = status.get("rebalance") or {}
        new: dict[str, Any] = self.last_rebalance.status()
        if not new:
            return {"rebalance": None} if "rebalance" in status else {}
        return {"rebalance": {**{pool: None for pool in old if pool not in new}, **new}}

    def _extra_conditions(self) -> list[Any]:
        condition = self.last_rebalance.condition
        return [condition] if condition is not None else []

    def _restart_scheduler(self, repo: dict) -> SchedulerSync:
        """Roll the kgwe-scheduler Deployment onto the applied configuration when it changed."""
        from kgwe.render.render import RenderOptions

        if self._scheduler is None:
            self._scheduler = SchedulerRestarter(
                self.api_client, RenderOptions().namespace, guard=self.is_leader
            )
        result = self._scheduler.sync()
        self.metrics.writes.labels(self.name).inc(self._scheduler.writes)
        self._scheduler.writes = 0
        if result.outcome == "restarted":
            self.recorder.normal(repo, "SchedulerRestarted", result.message)
        elif result.outcome == "invalid":
            self.recorder.warning(repo, "SchedulerConfigInvalid", result.message)
        return result

    # -- MIG rollout ------------------------------------------------------------------------------
    def _rollout(self, repo: dict, desired: Desired, facts: list[GpuNodeFacts]) -> RolloutPlan:
        states = node_states(desired, facts)
        now = self.now()
        plan = plan_rollout(states, desired.pools, now)
        ops = NodeOps(self.api_client, guard=self.is_leader)
        per_node: dict[str, list[Action]] = {}
        for action in plan.actions:  # one node's actions run in order (cordon before evict)
            per_node.setdefault(action.node, []).append(action)

        def run_node(actions: list[Action]) -> list[Action]:
            ran = []
            for action in actions:
                try:
                    revision = desired.revisions.get(desired.node_pool.get(action.node, ""))
                    self._do(ops, repo, action, now, revision)
                except ApiException as exc:
                    self.recorder.warning(
                        repo, "RolloutActionFailed", f"{action.kind} {action.node}: {exc.reason}"
                    )
                    break
                ran.append(action)
            return ran

        with ThreadPoolExecutor(max_workers=NODE_WORKERS) as workers:  # nodes are independent of each other
            done = [a for ran in workers.map(run_node, per_node.values()) for a in ran]
        selected: dict[str, list[str]] = {}
        for action in done:
            if action.kind == "relabel":
                selected.setdefault(action.config or "", []).append(action.node)
        for config, names in sorted(selected.items()):  # one Event per config, not one per node
            shown = ", ".join(sorted(names)[:10]) + (", ..." if len(names) > 10 else "")
            self.recorder.normal(
                repo, "MIGConfigSelected", f"nvidia.com/mig.config={config} on {len(names)} node(s): {shown}"
            )
        self.metrics.writes.labels(self.name).inc(ops.writes)
        after = plan_rollout(apply_actions(states, done, now), desired.pools, now)
        self.metrics.set_node_pools(self.name, desired.node_pool)
        for pool, progress in after.pools.items():
            self.metrics.rollout_pending.labels(self.name, pool).set(
                len(progress.pending) + len(progress.waiting_busy)
            )
            self.metrics.rollout_in_progress.labels(self.name, pool).set(
                len(progress.in_progress) + len(progress.draining)
            )
            self.metrics.rollout_failed.labels(self.name, pool).set(
                len(progress.failed) + len(progress.timed_out)
            )
        return RolloutPlan(tuple(done), after.pools)

    def _sharing_rollout(self, repo: dict, ps: Any, facts: list[GpuNodeFacts]) -> RolloutPlan:
        """Device-plugin labels of the GPUSharingStrategies, under the MIG gates (see sharing_rollout)."""

        def record(kind: str, reason: str, message: str) -> None:
            (self.recorder.normal if kind == "Normal" else self.recorder.warning)(repo, reason, message)

        plan, writes = run_sharing_rollout(
            self.api_client, ps.sharing_strategies, facts, self.now(), record=record, guard=self.is_leader
        )
        self.metrics.writes.labels(self.name).inc(writes)
        return plan

    def _do(self, ops: NodeOps, repo: dict, action: Action, now: datetime, revision: str | None) -> None:
        if action.kind == "relabel":
            ops.relabel(action.node, action.config or "", now, revision)
        elif action.kind == "acknowledge":
            ops.acknowledge(action.node)
            self.recorder.normal(
                repo,
                "MIGFailureAcknowledged",
                f"node {action.node}: {RETRY_ANNOTATION} taken; its pool's rollout no longer waits for it",
            )
        elif action.kind == "cordon":
            ops.cordon(action.node, action.config or "")
            self.recorder.normal(repo, "NodeCordoned", f"node {action.node} cordoned for a MIG layout change")
        elif action.kind == "evict":
            outcome = ops.evict_gpu_pods(action.node)
            if outcome.blocked:
                self.recorder.warning(
                    repo,
                    "EvictionBlocked",
                    f"node {action.node}: a PodDisruptionBudget "
                    f"blocks evicting {', '.join(outcome.blocked)}; will retry",
                )
        elif action.kind == "uncordon":
            ops.uncordon(action.node)
            self.recorder.normal(repo, "NodeUncordoned", f"node {action.node} uncordoned after MIG change")

    # -- status, events, snapshot -------------------------------------------------------------------
    def _events(
        self, repo: dict, revision: Revision, status: Mapping, sync: SyncResult, plan: RolloutPlan
    ) -> None:
        if sync.created or sync.updated:
            self.recorder.normal(
                repo,
                "Applied",
                f"revision {revision}: {len(sync.created)} created, "
                f"{len(sync.updated)} updated ({len(sync.drift_corrected)} drift corrected)",
            )
        if sync.pruned:
            self.recorder.normal(repo, "Pruned", "pruned " + ", ".join(str(r) for r in sync.pruned))
        for progress in plan.stalled:
            self.recorder.warning(repo, "RolloutStalled", progress.message())

    def _write_status(self, repo: dict, outcome: Outcome) -> None:
        current = repo.get("status") or {}
        generation = (repo.get("metadata") or {}).get("generation")
        new = next_status(current, outcome, generation=generation, now=self.now())
        if new == current or not self.is_leader():
            return
        self.status_writes += 1
        self.custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            {"status": new},
            _content_type="application/merge-patch+json",
            field_manager=FIELD_MANAGER,  # else the client's User-Agent names the status's manager
        )

    def _commit_snapshot(self, repo: dict, spec: PolicyRepositorySpec, phase: str) -> dict:
        """Commit the GPUInventory snapshot under the reports path (for offline `kgwe plan` in CI)."""
        doc = getattr(self, "_last_inventory_doc", None)
        if spec.reports is None or doc is None:
            return {}
        if self.last_rebalance.records:  # for `kgwe plan`'s preview of the next rebalance
            from kgwe.reconcile.rebalancing import snapshot_demand

            demand = snapshot_demand(self.last_rebalance.records)
            doc = {**doc, "spec": {**doc["spec"], "migDemand": demand}}
        digest = fingerprint(doc)  # no YAML dump of a fleet's inventory when it is unchanged
        if digest == self._snapshot_hash:
            return {}
        text = yaml.safe_dump(doc, sort_keys=False)
        base = spec.reports_path
        try:
            cb = self.commit_back(spec, "commit-back")
        except GitSourceError as exc:
            self.recorder.warning(repo, "CommitBackRejected", str(exc))
            return {"reportsStatus": {"lastPushError": str(exc)}}
        result = cb.commit_files({f"{base}/gpu-inventory.yaml": text}, summary="GPU inventory snapshot")
        self._snapshot_hash = digest  # also after a permanent rejection: never retry the same content
        if result.status == "rejected":
            self.metrics.commit_back_rejected.labels(self.name).inc()
            self.recorder.warning(repo, "CommitBackRejected", result.reason)
            return {"reportsStatus": {"lastPushError": result.reason}}
        if result.status == "failed":
            self._snapshot_hash = None
            return {}
        if result.status == "pushed":  # None removes an earlier error (merge patch)
            return {"reportsStatus": {"lastPushedCommit": result.sha, "lastPushError": None}}
        return {}


def _ready_message(repo: Mapping) -> str | None:
    for condition in (repo.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("message")
    return None


def node_states(desired: Desired, facts: list[GpuNodeFacts]) -> list[NodeState]:
    """What the rollout decision needs of each node a MIGStrategy manages, as read from the cluster."""
    return [
        NodeState(
            name=f.name,
            pool=desired.node_pool[f.name],
            desired_config=_same_or(desired, f),
            current_config=f.mig_config,
            state=f.mig_state,
            requested_at=f.requested_at,
            gpu_pods=len(f.gpu_pods),
            cordoned_by_kgwe=f.cordoned_by_kgwe,
            retry_requested=f.retry_requested,
            failure_acknowledged=f.failure_acknowledged,
        )
        for f in facts
        if f.name in desired.node_pool
    ]


def rollout_revision(strategy: Any) -> str:
    """Names one revision of a pool's MIGStrategy (its name and a digest of its spec): nodes changed for it
    are recorded with it, so commits that leave the strategy alone never re-plan nodes already changed."""
    spec = strategy.spec.model_dump(mode="json", by_alias=True)
    digest = hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
    return f"{strategy.name[:40]}.{digest}"


def _same_or(desired: Desired, facts: GpuNodeFacts) -> str:
    """The config to select on a node: its current one when that already means the same layout (e.g. the
    GPU Operator's `all-disabled` vs KGWE's `kgwe-all-disabled`): no node is paused or drained for nothing."""
    wanted = desired.node_configs[facts.name]
    current = facts.mig_config
    if current and current != wanted:
        now = config_layout(desired.mig_configs.get(current), facts.gpus)
        if now is not None and now == config_layout(desired.mig_configs.get(wanted), facts.gpus):
            return current
    return wanted


def _rendered_mig_configs(objects: list[dict], namespace: str, name: str) -> dict:
    from kgwe.policy.yaml_source import load_one

    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "ConfigMap" and meta.get("name") == name and meta.get("namespace") == namespace:
            for text in (obj.get("data") or {}).values():
                doc = load_one(text)
                if isinstance(doc, dict) and isinstance(doc.get("mig-configs"), dict):
                    return doc["mig-configs"]
    return {}


def live_mig_configs(core: client.CoreV1Api, namespace: str, name: str) -> dict:
    """The `mig-configs` of KGWE's mig-parted ConfigMap as it is in the cluster ({} when absent)."""
    try:
        cm = core.read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    from kgwe.policy.yaml_source import YamlSyntaxError, load_one

    for text in (cm.data or {}).values():
        try:
            doc = load_one(text)
        except YamlSyntaxError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("mig-configs"), dict):
            return doc["mig-configs"]
    return {}
