"""PolicyRepository status as kstatus expects it: Ready / Reconciling / Stalled conditions (negative
polarity conditions only while true), observedGeneration, revisions, inventory, rollout per pool.

Pure: the controller computes the new status from what happened and writes it only when it differs from
the live one (so a no-op reconcile writes nothing at all)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"


@dataclass(frozen=True)
class Outcome:
    """What one reconcile found. `phase` is one of:
    ready, progressing (rollout under way), stalled (a pool stopped), invalid (policy errors),
    spec_invalid (the PolicyRepository itself does not validate), fetch_failed, apply_failed,
    scheduler_invalid; once it is deleted: releasing, release_stalled (a node stopped the way out),
    release_failed (the API refused a write, or the spec names no deletion policy)."""

    phase: str
    message: str
    attempted_revision: str | None = None
    applied_revision: str | None = None  # set when this reconcile applied (or re-confirmed) a revision
    inventory: Sequence[Mapping] | None = None  # None: keep the previous inventory
    rollout: Mapping[str, Mapping] | None = None
    extra: Mapping[str, object] = field(default_factory=dict)
    conditions: Sequence[Any] = ()  # more conditions (objects with type, status, reason, message)


_TABLE = {
    # phase: (Ready status, Ready reason, Reconciling reason or None, Stalled reason or None)
    "ready": ("True", "ReconciliationSucceeded", None, None),
    "progressing": ("Unknown", "Progressing", "Progressing", None),
    "stalled": ("False", "RolloutStalled", None, "RolloutStalled"),
    "invalid": ("False", "ValidationFailed", None, "ValidationFailed"),
    "spec_invalid": ("False", "InvalidSpec", None, "InvalidSpec"),
    "fetch_failed": ("False", "GitOperationFailed", "ProgressingWithRetry", None),
    "apply_failed": ("False", "ReconciliationFailed", "ProgressingWithRetry", None),
    # applied, but kgwe-scheduler-config is missing or malformed: the KGWE scheduler is not restarted
    "scheduler_invalid": ("False", "SchedulerConfigInvalid", "ProgressingWithRetry", None),
    # deleted: KGWE releases what it wrote before its finalizer goes (kgwe.reconcile.release)
    "releasing": ("False", "Releasing", "Releasing", None),
    "release_stalled": ("False", "ReleaseStalled", None, "ReleaseStalled"),
    "release_failed": ("False", "ReleaseFailed", "ProgressingWithRetry", None),
}


def _condition(
    ctype: str,
    status: str,
    reason: str,
    message: str,
    generation: int | None,
    previous: Mapping[str, Mapping],
    now: str,
) -> dict:
    old = previous.get(ctype)
    same = old is not None and old.get("status") == status
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "observedGeneration": generation,
        "lastTransitionTime": (old.get("lastTransitionTime") if old is not None and same else None) or now,
    }


def next_status(current: Mapping | None, outcome: Outcome, *, generation: int | None, now: datetime) -> dict:
    """The status to write after `outcome` (copying what the outcome does not change)."""
    current = dict(current or {})
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    previous = {c.get("type"): c for c in current.get("conditions") or []}
    ready, ready_reason, reconciling, stalled = _TABLE[outcome.phase]
    conditions = [_condition(READY, ready, ready_reason, outcome.message, generation, previous, stamp)]
    if reconciling:
        conditions.append(
            _condition(RECONCILING, "True", reconciling, outcome.message, generation, previous, stamp)
        )
    if stalled:
        conditions.append(_condition(STALLED, "True", stalled, outcome.message, generation, previous, stamp))
    for more in outcome.conditions:
        conditions.append(
            _condition(more.type, more.status, more.reason, more.message, generation, previous, stamp)
        )
    status = dict(current)
    status["conditions"] = conditions
    status["observedGeneration"] = generation
    if outcome.attempted_revision:
        status["lastAttemptedRevision"] = outcome.attempted_revision
    if outcome.applied_revision:
        status["lastAppliedRevision"] = outcome.applied_revision
    if outcome.inventory is not None:
        status["inventory"] = [dict(e) for e in outcome.inventory]
    if outcome.rollout is not None:
        status["rollout"] = {k: dict(v) for k, v in outcome.rollout.items()}
    status.update(outcome.extra)
    return status


def condition(status: Mapping | None, ctype: str) -> Mapping | None:
    return next((c for c in (status or {}).get("conditions") or [] if c.get("type") == ctype), None)
