"""Conditions, one type for every kind KGWE writes (kgwe.policy.cluster_kinds.Condition: metav1.Condition)
and the helpers every reader and writer uses: find one by type, test it, set it (its lastTransitionTime moves
only when its status flips), and sum a pass up in kstatus's three (Ready always; Reconciling and Stalled,
abnormal-true, only while true). The readers also take conditions as the API sends them (dicts of a Pod, a
Job, a Node or another object's status, or the kubernetes client's models of them). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar, cast

from pydantic import ValidationError

from kgwe.policy.cluster_kinds import Condition
from kgwe.timestamps import format_rfc3339

READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
MAX_MESSAGE_CHARS = 32768  # metav1.Condition's message limit
ConditionStatus = Literal["True", "False", "Unknown"]

C = TypeVar("C", Condition, Mapping[str, Any])


def _get(c: object, field: str) -> Any:
    """A field of a condition: the model's, the API's dict's, or a kubernetes client model's."""
    return c.get(field) if isinstance(c, Mapping) else getattr(c, field, None)


def find(conditions: Iterable[C] | None, ctype: str) -> C | None:
    """The condition of type `ctype`, or None (entries that are no condition are passed over)."""
    if not isinstance(conditions, list | tuple):
        return None
    return next((c for c in conditions if _get(c, "type") == ctype), None)


def of(obj: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The conditions in an object's status, as the API sent them."""
    found = ((obj or {}).get("status") or {}).get("conditions")
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def parse(found: object) -> list[Condition]:
    """Conditions as the API sent them, as the model (one that does not validate is left out)."""
    out = []
    for c in found if isinstance(found, list) else []:
        try:
            out.append(Condition.model_validate(c))
        except ValidationError:
            continue
    return out


def dump(conditions: Iterable[Condition]) -> list[dict[str, Any]]:
    """Conditions as the API holds them."""
    return [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in conditions]


def status_of(conditions: Iterable[C] | None, ctype: str) -> str | None:
    """The status ("True", "False", "Unknown") of the condition of type `ctype`; None without one."""
    found = find(conditions, ctype)
    return None if found is None else cast(str | None, _get(found, "status"))


def is_true(conditions: Iterable[C] | None, ctype: str) -> bool:
    return status_of(conditions, ctype) == "True"


def set_condition(
    conditions: list[Condition],
    ctype: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: datetime,
) -> bool:
    """Set one condition in place; lastTransitionTime moves only when its status flips. True when its
    status, reason or message changed (a new condition included)."""
    message = message[:MAX_MESSAGE_CHARS]
    old = find(conditions, ctype)
    if old is None:
        conditions.append(
            Condition(
                type=ctype,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=format_rfc3339(now),
                observed_generation=generation,
            )
        )
        return True
    changed = (old.status, old.reason, old.message) != (status, reason, message)
    if old.status != status or not old.last_transition_time:
        old.last_transition_time = format_rfc3339(now)
    old.status, old.reason, old.message, old.observed_generation = status, reason, message, generation
    return changed


@dataclass(frozen=True)
class Summary:
    """A pass summed up as kstatus reads it: Ready's status and reason, and the reasons of Reconciling and
    Stalled when either is true."""

    ready: ConditionStatus
    reason: str
    reconciling: str | None = None
    stalled: str | None = None


def summarise(
    previous: Sequence[Condition],
    summary: Summary,
    message: str,
    *,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """Ready, then Reconciling and Stalled while true (each keeps its lastTransitionTime from `previous`
    while its status holds); a condition no longer true is left out, as kstatus expects."""
    out = [c.model_copy() for c in previous if c.type in (READY, RECONCILING, STALLED)]
    kept: list[Condition] = []
    wanted: list[tuple[str, ConditionStatus, str]] = [(READY, summary.ready, summary.reason)]
    if summary.reconciling:
        wanted.append((RECONCILING, "True", summary.reconciling))
    if summary.stalled:
        wanted.append((STALLED, "True", summary.stalled))
    for ctype, status, reason in wanted:
        set_condition(out, ctype, status, reason, message, generation=generation, now=now)
        found = find(out, ctype)
        assert found is not None
        kept.append(found)
    return kept
