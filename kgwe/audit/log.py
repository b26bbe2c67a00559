"""The monthly audit log the leader commits under a PolicyRepository's reports path: one JSON object per line
(JSON Lines), one line per reconcile that wrote to the cluster — when, which repository, the policy commit
and its author, what the pass applied, the objects created, updated, pruned and put back after a hand edit,
the Nodes relabelled, cordoned, drained and uncordoned, the KGWE scheduler restarted, the budget quotas
written capped or not.

Anyone who may commit to the repository can edit the file, so nothing in it decides anything. What KGWE has
written is KGWE's own state (LogState, kept in the PolicyRepository's status): the file it appends to, how
many lines and bytes it wrote there, and a hash chain — each of its lines names the SHA-256 of the line
before (`prev`), the state holds the hash of the last. Before appending, the file is checked against that
state (verify): a line of KGWE's changed, removed or reordered, or any line KGWE did not write, is
tampering; KGWE then leaves that file as it is, as evidence, and goes on in a new file of the month whose
name nobody can guess (`<YYYY-MM>.<random>.jsonl`), whose first line says why. The file that cannot be read
at all (a symlink, a folder, too large) is treated the same.

Append-only: KGWE only ever adds lines after its own, never rewrites one. Bounded: every list in an entry
names at most MAX_NAMES (with the true count beside it), and KGWE's own lines in one file reach at most
MAX_LOG_BYTES — counted in its state, so no padding or line of anyone else's can fill the month; the line
that would pass the bound is replaced by one closing line (`"logFull": true`), and entries after it wait
for the next month's file. Pure: bytes in, bytes out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeGuard

from kgwe.audit.stamp import Stamp
from kgwe.timestamps import format_rfc3339
from kgwe.vocab import AUDIT_FOLDER

COMMIT_INTERVAL_SECONDS = 300.0  # the leader commits the log at most this often (also with each snapshot)
MAX_PENDING = 1000  # entries kept for the next commit; those past it are counted and the count is logged
MAX_LOG_BYTES = 4 * 1024 * 1024  # KGWE's lines in one month's file: ~10,000 entries of a busy fleet
MAX_NAMES = 25  # names listed per kind in one entry (the count says how many there were)
LOG_SUFFIX = ".jsonl"
CHAIN_KEY = "prev"  # each line KGWE writes: the SHA-256 (hex) of the line before it in KGWE's chain
_FULL_KEY = "logFull"
_LOG_NAME = re.compile(r"^([0-9]{4}-[0-9]{2})(?:\.([0-9a-f]{8,32}))?" + re.escape(LOG_SUFFIX) + "$")
_DIGEST = re.compile(r"^(?:[0-9a-f]{64})?$")


def is_log_path(path: str) -> bool:
    """Whether `path` names an audit log file: `.../audit/<YYYY-MM>.jsonl`, or a file KGWE went on in after
    it found one tampered with, `.../audit/<YYYY-MM>.<hex>.jsonl`."""
    folder, _, name = path.rpartition("/")
    return (folder == AUDIT_FOLDER or folder.endswith("/" + AUDIT_FOLDER)) and bool(_LOG_NAME.match(name))


def line_hash(line: bytes) -> str:
    """The SHA-256 (hex) a line is known by in the chain: of its bytes without the newline."""
    return hashlib.sha256(line.removesuffix(b"\n")).hexdigest()


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


def log_path(reports_path: str, when: datetime, token: str = "") -> str:
    """Where the month of `when` (UTC) is logged: `<reports path>/audit/<YYYY-MM>.jsonl`, or with `token`
    (hex) the file KGWE goes on in after tampering, `<YYYY-MM>.<token>.jsonl`."""
    name = f"{format_rfc3339(when)[:7]}{'.' + token if token else ''}{LOG_SUFFIX}"
    return f"{reports_path.strip('/')}/{AUDIT_FOLDER}/{name}"


@dataclass(frozen=True)
class LogState:
    """What KGWE itself wrote to the file it appends to: kept in the PolicyRepository's status
    (`status.auditLog`), never read from the file, so no commit can change it. `start` is the chain's hash
    before the file's first line (the previous file's last), `head` the hash of KGWE's last line there
    (`start` before the first), `lines` and `bytes` what KGWE wrote there, `full` whether it closed it;
    `seq` counts every change, so of two states the newer is known."""

    path: str
    start: str = ""
    head: str = ""
    lines: int = 0
    bytes: int = 0
    full: bool = False
    seq: int = 0

    @property
    def month(self) -> str:
        found = _LOG_NAME.match(self.path.rpartition("/")[2])
        return found.group(1) if found else ""

    def record(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "start": self.start,
            "head": self.head,
            "lines": self.lines,
            "bytes": self.bytes,
            "full": self.full,
            "seq": self.seq,
        }

    @classmethod
    def from_record(cls, raw: object) -> LogState | None:
        """The state a status holds; None when it holds none, or one KGWE would not have written."""
        if not isinstance(raw, Mapping):
            return None
        path, start, head, full = raw.get("path"), raw.get("start"), raw.get("head"), raw.get("full")
        lines, size, seq = raw.get("lines"), raw.get("bytes"), raw.get("seq")
        if not (isinstance(path, str) and is_log_path(path) and isinstance(full, bool)):
            return None
        if not (
            isinstance(start, str) and _DIGEST.match(start) and isinstance(head, str) and _DIGEST.match(head)
        ):
            return None
        if not (_count(lines) and _count(size) and _count(seq)):
            return None
        return cls(path, start, head, lines=lines, bytes=size, full=full, seq=seq)


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def current_state(state: LogState | None, reports_path: str, when: datetime) -> LogState:
    """The state to append under at `when`: `state` while its file is this month's under `reports_path`,
    else a new file of this month whose chain starts where `state`'s ended."""
    folder, _, name = log_path(reports_path, when).rpartition("/")
    if state is not None and state.month == name[:7] and state.path.rpartition("/")[0] == folder:
        return state
    head = state.head if state is not None else ""
    return LogState(f"{folder}/{name}", start=head, head=head, seq=state.seq + 1 if state is not None else 0)


def moved_state(state: LogState, reports_path: str, when: datetime, token: str) -> LogState:
    """The state after KGWE leaves `state`'s file (tampered with, or unreadable) for a new one, `token` its
    unguessable part; the chain goes on from KGWE's last line."""
    return LogState(log_path(reports_path, when, token), start=state.head, head=state.head, seq=state.seq + 1)


def verify(data: bytes | None, state: LogState) -> str | None:
    """What is wrong with the file `state` describes, as it is now (`data`; None: absent), or None when it
    holds exactly the lines KGWE wrote there, in order, and nothing else."""
    lines = data.split(b"\n") if data else []
    if lines and lines[-1] == b"":
        lines.pop()
    if data is None and state.lines:
        return f"is gone: KGWE wrote {state.lines} line(s) there"
    expected = state.start
    for number, raw in enumerate(lines[: state.lines], 1):
        parsed = _parse(raw)
        if parsed is None or parsed.get(CHAIN_KEY) != expected:
            return (
                f"is not as KGWE wrote it: its hash chain breaks at line {number} (that line, or one before "
                "it, was changed, removed or put in)"
            )
        expected = line_hash(raw)
    if len(lines) < state.lines:
        return f"holds {len(lines)} line(s) where KGWE wrote {state.lines}"
    if expected != state.head:
        return f"is not as KGWE wrote it: line {state.lines}, KGWE's last, was changed"
    if len(lines) > state.lines:
        return f"holds {len(lines) - state.lines} line(s) KGWE did not write"
    if data and not data.endswith(b"\n"):
        return "holds text KGWE did not write after its last line"
    return None


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


def dropped_record(when: datetime, count: int) -> dict[str, Any]:
    """Says that `count` entries were lost before they could be committed (more than MAX_PENDING waited)."""
    return {"time": format_rfc3339(when), "dropped": count}


def moved_record(when: datetime, path: str, problem: str) -> dict[str, Any]:
    """The first line of a file KGWE goes on in: which file it left, and why."""
    return {"time": format_rfc3339(when), "continuesFrom": path, "tampering": problem}


@dataclass(frozen=True)
class Appended:
    """What `append` made of a file: its new bytes (`data`; None when it was absent and stays so), the state
    after, how many records went in (`kept`), and `problem` when the file was not as KGWE left it (then
    nothing went in and `data` is the file unchanged)."""

    data: bytes | None
    state: LogState
    kept: int = 0
    problem: str | None = None

    @property
    def closed(self) -> bool:
        return self.state.full


def append(
    existing: bytes | None,
    records: Sequence[Mapping[str, Any]],
    when: datetime,
    state: LogState,
    max_bytes: int = MAX_LOG_BYTES,
) -> Appended:
    """The file `state` describes with `records` appended, each chained to the one before. Nothing is
    appended to a file that is not as KGWE left it (verify), nor once KGWE's own lines in it would pass
    `max_bytes`: the record that would is replaced by one closing line."""
    problem = verify(existing, state)
    if problem is not None:
        return Appended(existing, state, problem=problem)
    if state.full or not records:
        return Appended(existing, state)
    data, head, lines, size, kept, full = existing or b"", state.head, state.lines, state.bytes, 0, False
    closing_bytes = len(
        _chained({"time": format_rfc3339(when), _FULL_KEY: True, "maxBytes": max_bytes}, head)
    )
    for record in records:
        line = _chained(record, head)
        if size + len(line) + closing_bytes > max_bytes:
            line = _chained({"time": format_rfc3339(when), _FULL_KEY: True, "maxBytes": max_bytes}, head)
            full = True
        data += line
        head, lines, size = line_hash(line), lines + 1, size + len(line)
        if full:
            break
        kept += 1
    after = replace(state, head=head, lines=lines, bytes=size, full=full, seq=state.seq + 1)
    return Appended(data, after, kept)


def _chained(record: Mapping[str, Any], prev: str) -> bytes:
    return _line({**record, CHAIN_KEY: prev}).encode()


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
    says how many were lost (dropped_record) when the rest is committed."""

    limit: int
    entries: list[AuditEntry] = field(default_factory=list)
    dropped: int = 0

    def add(self, entry: AuditEntry) -> bool:
        """Keep `entry`; False when it was only counted (more than `limit` wait)."""
        if len(self.entries) >= self.limit:
            self.dropped += 1
            return False
        self.entries.append(entry)
        return True

    def records(self, when: datetime) -> list[dict[str, Any]]:
        """The lines to append, in order: how many were lost (if any), then the entries."""
        lost = [dropped_record(when, self.dropped)] if self.dropped else []
        return [*lost, *(entry.record() for entry in self.entries)]

    def forget(self, kept: int) -> None:
        """The first `kept` of `records()` are in the log."""
        if kept and self.dropped:
            self.dropped, kept = 0, kept - 1
        del self.entries[:kept]
