"""The monthly audit log the leader commits under a PolicyRepository's reports path: one JSON object per line
(JSON Lines), one line per reconcile that wrote to the cluster — when, which repository, the policy commit
and its author, what the pass applied, the objects created, updated, pruned and put back after a hand edit,
the Nodes relabelled, cordoned, drained and uncordoned, the KGWE scheduler restarted, the budget quotas
written capped or not.

Append-only: KGWE only ever adds lines after what the file holds, never rewrites one. Bounded: every list in
an entry names at most MAX_NAMES (with the true count beside it), and a month's file grows to at most
MAX_LOG_BYTES; the line that would pass the bound is replaced by one closing line (`"logFull": true`), and
nothing is appended after it that month (the annotations and Events still tell). Pure: bytes in, bytes out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kgwe.audit.stamp import Stamp
from kgwe.timestamps import format_rfc3339
from kgwe.vocab import AUDIT_FOLDER

COMMIT_INTERVAL_SECONDS = 300.0  # the leader commits the log at most this often (also with each snapshot)
MAX_PENDING = 1000  # entries kept for the next commit; those past it are counted and the count is logged
MAX_LOG_BYTES = 4 * 1024 * 1024  # one month's file: ~10,000 entries of a busy fleet
MAX_NAMES = 25  # names listed per kind in one entry (the count says how many there were)
LOG_SUFFIX = ".jsonl"
_FULL_KEY = "logFull"


def is_log_path(path: str) -> bool:
    """Whether `path` names a month's audit log (`.../audit/<YYYY-MM>.jsonl`)."""
    folder, _, name = path.rpartition("/")
    month = name.removesuffix(LOG_SUFFIX)
    return (
        (folder == AUDIT_FOLDER or folder.endswith("/" + AUDIT_FOLDER))
        and name.endswith(LOG_SUFFIX)
        and len(month) == 7
        and month[4] == "-"
        and (month[:4] + month[5:]).isdigit()
    )


def plan_note(newest: str | None) -> str:
    """The line `kgwe plan` ends with: where the audit log of what KGWE wrote is (`newest`: the newest
    month's file found at base — what the pull request itself adds there is not KGWE's — if any)."""
    if newest:
        return (
            f"Audit log: [`{newest}`]({newest}) at base: one line per reconcile that changed the cluster "
            "(policy commit, author, objects, nodes, budget quotas).\n"
        )
    return (
        f"Audit log: none at base yet; once applied, the controller appends what it writes to "
        f"`<spec.reports.path>/{AUDIT_FOLDER}/<YYYY-MM>{LOG_SUFFIX}` in this repository.\n"
    )


def log_path(reports_path: str, when: datetime) -> str:
    """Where the month of `when` (UTC) is logged: `<reports path>/audit/<YYYY-MM>.jsonl`."""
    return f"{reports_path.strip('/')}/{AUDIT_FOLDER}/{format_rfc3339(when)[:7]}{LOG_SUFFIX}"


@dataclass(frozen=True)
class NodeChange:
    """One Node write of a rollout: `action` is relabel, cordon, evict (one of its GPU pods), uncordon or
    acknowledge (a person's retry request taken); a relabel names the label and `value` it set, an
    eviction the pod (namespace/name) as `value`."""

    node: str
    action: str
    label: str = ""
    value: str = ""


@dataclass(frozen=True)
class QuotaChange:
    """A budget's `kgwe-budget` ResourceQuota written: capped at current use (an Enforce budget exhausted)
    or as the budget sets it."""

    namespace: str
    capped: bool
    hard: Mapping[str, str]


@dataclass(frozen=True)
class AuditEntry:
    time: datetime
    repository: str  # namespace/name of the PolicyRepository
    stamp: Stamp  # the policy commit in force and its author
    applied: str  # the revision the pass applied (the ref's head: may be a later commit that left the policy)
    created: Sequence[str] = ()  # Kind/namespace/name
    updated: Sequence[str] = ()
    pruned: Sequence[str] = ()
    drift_corrected: Sequence[str] = ()  # of `updated`: a hand edit undone
    nodes: Sequence[NodeChange] = ()
    scheduler_restarted: bool = False
    quotas: Sequence[QuotaChange] = ()

    @property
    def empty(self) -> bool:
        """Nothing was written: no line."""
        return not (
            self.created
            or self.updated
            or self.pruned
            or self.nodes
            or self.scheduler_restarted
            or self.quotas
        )

    def record(self) -> dict[str, Any]:
        """The entry as the JSON object of its line (empty parts left out)."""
        out: dict[str, Any] = {
            "time": format_rfc3339(self.time),
            "repository": self.repository,
            "revision": self.stamp.revision,
            "author": self.stamp.author,
            "applied": self.applied,
        }
        objects = {
            key: _names(values)
            for key, values in (
                ("created", self.created),
                ("updated", self.updated),
                ("pruned", self.pruned),
                ("driftCorrected", self.drift_corrected),
            )
            if values
        }
        if objects:
            out["objects"] = objects
        nodes: dict[str, list[str]] = {}
        for change in self.nodes:
            what = change.node
            if change.action == "relabel":
                what = f"{change.node}: {change.label}={change.value}"
            elif change.value:
                what = f"{change.node}: {change.value}"
            nodes.setdefault(_NODE_KEYS.get(change.action, change.action), []).append(what)
        if nodes:
            out["nodes"] = {key: _names(values) for key, values in sorted(nodes.items())}
        if self.scheduler_restarted:
            out["schedulerRestarted"] = True
        if self.quotas:
            quotas = [
                {"namespace": q.namespace, "capped": q.capped, "hard": dict(sorted(q.hard.items()))}
                for q in sorted(self.quotas, key=lambda q: q.namespace)
            ]
            out["budgetQuotas"] = {"count": len(quotas), "names": quotas[:MAX_NAMES]}
        return out

    def line(self) -> str:
        return _line(self.record())


_NODE_KEYS = {
    "relabel": "relabelled",
    "cordon": "cordoned",
    "evict": "drained",
    "uncordon": "uncordoned",
    "acknowledge": "acknowledged",
}


def dropped_line(when: datetime, count: int) -> str:
    """Says that `count` entries were lost before they could be committed (the queue was full)."""
    return _line({"time": format_rfc3339(when), "dropped": count})


def append(
    existing: bytes | None, lines: Sequence[str], when: datetime, max_bytes: int = MAX_LOG_BYTES
) -> tuple[bytes, int]:
    """The month's file with `lines` appended, and how many of them were. The line that would pass
    `max_bytes` is replaced by one closing line; a closed file gets nothing more."""
    data = existing or b""
    if is_closed(data):
        return data, 0
    if data and not data.endswith(b"\n"):
        data += b"\n"  # a line someone left unfinished stays theirs; ours starts on its own line
    closing = _line({"time": format_rfc3339(when), _FULL_KEY: True, "maxBytes": max_bytes}).encode()
    kept = 0
    for text in lines:
        encoded = text.encode()
        if len(data) + len(encoded) + len(closing) > max_bytes:
            return data + closing, kept
        data += encoded
        kept += 1
    return data, kept


def is_closed(data: bytes) -> bool:
    """Whether the file's last line is the closing line: the month's log is full."""
    last = _last_line(data)
    return last is not None and last.get(_FULL_KEY) is True


def _last_line(data: bytes) -> dict[str, Any] | None:
    lines = data.rstrip(b"\n").rsplit(b"\n", 1)
    return _parse(lines[-1]) if lines and lines[-1] else None


def _parse(raw: bytes) -> dict[str, Any] | None:
    if len(raw) > MAX_LOG_BYTES:
        return None
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _names(values: Sequence[str]) -> dict[str, Any]:
    return {"count": len(values), "names": sorted(values)[:MAX_NAMES]}


def _line(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


@dataclass
class Pending:
    """Entries waiting to be committed, at most `limit` of them; those past it are counted, and the log
    says how many were lost (dropped_line) when the rest is committed."""

    limit: int
    entries: list[AuditEntry] = field(default_factory=list)
    dropped: int = 0

    def add(self, entry: AuditEntry) -> None:
        if len(self.entries) >= self.limit:
            self.dropped += 1
        else:
            self.entries.append(entry)

    def by_file(self, reports_path: str, when: datetime) -> dict[str, list[str]]:
        """The lines to append, per month's file (a lost count goes to the month of `when`)."""
        files: dict[str, list[str]] = {}
        for entry in self.entries:
            files.setdefault(log_path(reports_path, entry.time), []).append(entry.line())
        if self.dropped:
            files.setdefault(log_path(reports_path, when), []).append(dropped_line(when, self.dropped))
        return files
