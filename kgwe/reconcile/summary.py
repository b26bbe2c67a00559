"""What one reconcile pass found, as its steps hand it on (Pass), and the one function that sums it up into
the Outcome the status is written from (summarize). Pure: no step runs here, nothing is read or written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgwe.audit.stamp import Stamp
from kgwe.cluster.apply import SyncResult
from kgwe.policy.cluster_kinds import Condition, PolicyRepositorySpec
from kgwe.policy.diagnostics import Diagnostic
from kgwe.policy.loader import PolicySet
from kgwe.reconcile.rebalancing import RebalanceResult
from kgwe.reconcile.rollout import RolloutPlan
from kgwe.reconcile.scheduler_restart import SchedulerSync
from kgwe.reconcile.status import Outcome

MAX_ERRORS_IN_MESSAGE = 5


@dataclass
class Pass:
    """The typed state of one pass: each step fills in its part, in order."""

    repo: Mapping[str, Any]  # the PolicyRepository as read at the start of the pass
    spec: PolicyRepositorySpec
    rebalance: RebalanceResult  # the records in force (the last pass's until this one decides)
    pushed: bool = False  # a push named the repository: its ref moved
    revision: str | None = None  # fetch: the tracked ref resolved, e.g. main@sha1:...
    fetch_error: str | None = None
    policy: PolicySet | None = None  # validate: the revision's policy, when valid
    errors: list[str] = field(default_factory=list)  # validate: why it is not
    stamp: Stamp | None = None  # the policy commit converged (this revision's, or the last good one's)
    converged: str | None = None  # the revision converged
    quota_caps: Mapping[str, Any] = field(default_factory=dict)  # namespace -> the cap of an Enforce budget
    quotas: Sequence[Mapping[str, Any]] = ()  # the budget quotas rendered
    sync: SyncResult | None = None  # apply (of this revision, or of the last good one when invalid)
    plan: RolloutPlan | None = None  # rollout: the waves as they stand after this pass's actions
    scheduler: SchedulerSync | None = None  # the KGWE scheduler rolled onto the applied configuration
    snapshot: dict[str, Any] = field(default_factory=dict)  # status the inventory commit-back adds
    audit_log: dict[str, Any] = field(default_factory=dict)  # status the audit trail adds (its own state)

    @property
    def status(self) -> Mapping[str, Any]:
        return self.repo.get("status") or {}


def summarize(p: Pass) -> Outcome:
    """The Outcome of a pass: the first step that stopped it decides the phase, else the rollout's health."""
    if p.fetch_error is not None or p.revision is None:
        return Outcome("fetch_failed", p.fetch_error or "no revision")
    common: dict[str, Any] = {
        "attempted_revision": p.revision,
        "rollout": {name: pool.as_status() for name, pool in p.plan.pools.items()} if p.plan else None,
        "conditions": _conditions(p.rebalance),
    }
    if p.errors:
        last = p.status.get("lastAppliedRevision")
        message = (
            f"revision {p.revision} is invalid, nothing applied; last applied revision "
            f"{last or '(none)'} stays in force: " + "; ".join(p.errors)
        )
        extra = rebalance_status(p.rebalance, p.status) if p.plan is not None else {}
        return Outcome("invalid", message, extra={**p.audit_log, **extra}, **common)
    assert p.sync is not None and p.plan is not None
    extra = {**p.audit_log, **rebalance_status(p.rebalance, p.status)}
    common.update(inventory=inventory_status(p.sync), extra=extra)
    if p.sync.failed:
        failed = "; ".join(f"{ref}: {why}" for ref, why in p.sync.failed[:MAX_ERRORS_IN_MESSAGE])
        return Outcome("apply_failed", f"applying revision {p.revision} failed for {failed}", **common)
    if p.scheduler is not None and p.scheduler.outcome == "invalid":  # the scheduler keeps running
        message = f"revision {p.revision} applied except the scheduler restart: {p.scheduler.message}"
        return Outcome("scheduler_invalid", message, **common)
    phase, message = health(p.plan, p.revision)
    common["extra"] = {**p.snapshot, **common["extra"]}
    return Outcome(phase, message, applied_revision=p.revision, **common)


def health(plan: RolloutPlan, revision: str) -> tuple[str, str]:
    """(phase, message) of an applied revision: stalled, progressing (a MIG or sharing wave under way) or
    ready."""
    if plan.stalled:
        return "stalled", "; ".join(p.message() for p in plan.stalled)
    waiting = [p.message() for p in plan.pools.values() if not p.complete]
    if waiting:
        return "progressing", f"revision {revision} applied; MIG rollout: " + "; ".join(waiting)
    return "ready", f"applied revision {revision}"


def inventory_status(sync: SyncResult) -> list[dict[str, Any]]:
    """status.inventory: what is applied. Objects the API refused stay in it, so a later success or prune
    still sees them."""
    inventory = [r.as_status() for r in sorted(set(sync.applied + sync.unchanged))]
    return inventory + [r.as_status() for r, _ in sync.failed if r.as_status() not in inventory]


def rebalance_status(result: RebalanceResult, status: Mapping[str, Any]) -> dict[str, Any]:
    """The status.rebalance to write (merge patch: a pool no longer rebalancing is removed with null)."""
    old = status.get("rebalance") or {}
    new: dict[str, Any] = result.status()
    if not new:
        return {"rebalance": None} if "rebalance" in status else {}
    return {"rebalance": {**{pool: None for pool in old if pool not in new}, **new}}


def _conditions(result: RebalanceResult) -> Sequence[Condition]:
    return [result.condition] if result.condition is not None else []


def error_lines(diagnostics: Sequence[Diagnostic]) -> list[str]:
    """Policy errors as `file:line:column: field path: message`, at most MAX_ERRORS_IN_MESSAGE of them."""
    errors = [
        f"{d.file}:{d.line}:{d.column}: {d.path + ': ' if d.path else ''}{d.message}" for d in diagnostics
    ]
    if len(errors) > MAX_ERRORS_IN_MESSAGE:
        errors = [*errors[:MAX_ERRORS_IN_MESSAGE], f"and {len(errors) - MAX_ERRORS_IN_MESSAGE} more"]
    return errors
