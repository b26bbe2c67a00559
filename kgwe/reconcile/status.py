"""PolicyRepository status as kstatus expects it: Ready / Reconciling / Stalled conditions (negative
polarity conditions only while true, kgwe.runtime.conditions), observedGeneration, revisions, inventory,
rollout per pool.

Pure: the controller computes the new status from what happened (through the PolicyRepositoryStatus model)
and writes it only when it differs from the live one (kgwe.runtime.status: a no-op reconcile writes nothing
at all)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from kgwe.policy.cluster_kinds import Condition, PolicyRepositoryStatus
from kgwe.runtime.conditions import (
    READY,
    RECONCILING,
    STALLED,
    Summary,
    dump,
    find,
    parse,
    set_condition,
    summarise,
)
from kgwe.runtime.status import merge_patch

log = logging.getLogger(__name__)


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
    inventory: Sequence[Mapping[str, Any]] | None = None  # None: keep the previous inventory
    rollout: Mapping[str, Mapping[str, Any]] | None = None
    extra: Mapping[str, object] = field(default_factory=dict)  # merged into status (a None removes a key)
    conditions: Sequence[Condition] = ()  # more conditions (type, status, reason, message)


_TABLE = {
    "ready": Summary("True", "ReconciliationSucceeded"),
    "progressing": Summary("Unknown", "Progressing", reconciling="Progressing"),
    "stalled": Summary("False", "RolloutStalled", stalled="RolloutStalled"),
    "invalid": Summary("False", "ValidationFailed", stalled="ValidationFailed"),
    "spec_invalid": Summary("False", "InvalidSpec", stalled="InvalidSpec"),
    "fetch_failed": Summary("False", "GitOperationFailed", reconciling="ProgressingWithRetry"),
    "apply_failed": Summary("False", "ReconciliationFailed", reconciling="ProgressingWithRetry"),
    # applied, but kgwe-scheduler-config is missing or malformed: the KGWE scheduler is not restarted
    "scheduler_invalid": Summary("False", "SchedulerConfigInvalid", reconciling="ProgressingWithRetry"),
    # deleted: KGWE releases what it wrote before its finalizer goes (kgwe.reconcile.release)
    "releasing": Summary("False", "Releasing", reconciling="Releasing"),
    "release_stalled": Summary("False", "ReleaseStalled", stalled="ReleaseStalled"),
    "release_failed": Summary("False", "ReleaseFailed", reconciling="ProgressingWithRetry"),
}
# The phases a retry may mend by itself (kstatus' ProgressingWithRetry): the loop retries them with backoff.
RETRY_PHASES = frozenset(phase for phase, s in _TABLE.items() if s.reconciling == "ProgressingWithRetry")
SUMMARY_CONDITIONS = (READY, RECONCILING, STALLED)


def _conditions(
    current: Mapping[str, Any], outcome: Outcome, generation: int | None, now: datetime
) -> list[Condition]:
    previous = parse(current.get("conditions"))
    summary = _TABLE[outcome.phase]
    conditions = summarise(previous, summary, outcome.message, generation=generation, now=now)
    others = [c.model_copy() for c in previous if c.type not in SUMMARY_CONDITIONS]
    for more in outcome.conditions:
        set_condition(
            others,
            more.type,
            more.status,
            more.reason or "",
            more.message or "",
            generation=generation,
            now=now,
        )
        found = find(others, more.type)
        assert found is not None
        conditions.append(found)
    return conditions


def next_status(
    current: Mapping[str, Any] | None, outcome: Outcome, *, generation: int | None, now: datetime
) -> dict[str, Any]:
    """The status to write after `outcome` (copying what the outcome does not change), as the API holds it."""
    doc: dict[str, Any] = dict(current or {})
    doc["conditions"] = dump(_conditions(doc, outcome, generation, now))
    doc["observedGeneration"] = generation
    if outcome.attempted_revision:
        doc["lastAttemptedRevision"] = outcome.attempted_revision
    if outcome.applied_revision:
        doc["lastAppliedRevision"] = outcome.applied_revision
    if outcome.inventory is not None:
        doc["inventory"] = [dict(e) for e in outcome.inventory]
    if outcome.rollout is not None:
        doc["rollout"] = {k: dict(v) for k, v in outcome.rollout.items()}
    doc = merge_patch(doc, outcome.extra)
    try:
        status = PolicyRepositoryStatus.model_validate(doc)
    except ValidationError as exc:  # a hand-edited status: rebuilt from this outcome alone
        log.warning("PolicyRepository status does not validate (%s); writing it anew", exc.errors()[0]["msg"])
        return next_status(None, outcome, generation=generation, now=now)
    written: dict[str, Any] = status.model_dump(
        mode="json", by_alias=True, exclude_unset=True, exclude_none=True
    )
    return written


def condition(status: Mapping[str, Any] | None, ctype: str) -> Mapping[str, Any] | None:
    """The condition of type `ctype` in a PolicyRepository status (as the API holds it)."""
    return find((status or {}).get("conditions"), ctype)
