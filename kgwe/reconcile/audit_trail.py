"""The audit duty of a PolicyRepository's reconciler (docs/audit.md): one entry per pass that wrote anything,
kept until the leader appends the waiting entries to this month's file under `<reports path>/audit/` — with
the next inventory snapshot, or on their own at most every `flush_seconds` (kgwe.audit.log).

What KGWE wrote to the log is its own state, never the file's word: the LogState (file, line and byte
counts, the hash chain's head) lives here between passes and in the PolicyRepository's status
(`status.auditLog`) across restarts and leaders; each pass hands it to the status through `Pass.audit_log`.
A file not as KGWE left it, or that cannot be read, is reported (a Warning and `status.auditLog.tampering`)
and KGWE goes on in a new file at once, the entries still waiting; nothing waiting is dropped without a
Warning that says how many.

The reconciler hands each pass over as its plain record (kgwe.reconcile.summary.Pass) with the Node writes
the pass made; this class reads nothing from the cluster and holds no client."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from kgwe.audit.log import (
    MAX_LOG_BYTES,
    MAX_PENDING,
    Appended,
    AuditEntry,
    LogState,
    NodeChange,
    Pending,
    QuotaChange,
    append,
    current_state,
    moved_record,
    moved_state,
)
from kgwe.cluster.apply import SyncResult
from kgwe.gitops.commit_back import CommitBack, CommitResult, Edit
from kgwe.gitops.source import GitSourceError
from kgwe.policy.cluster_kinds import PolicyRepositorySpec
from kgwe.reconcile.summary import Pass
from kgwe.timestamps import format_rfc3339
from kgwe.vocab import BUDGET_QUOTA_NAME

REJECTED_REASON = "CommitBackRejected"  # the Warning's reason when the reports branch refuses a commit
TAMPERED_REASON = "AuditLogTampered"  # a log file not as KGWE left it, or unreadable
FULL_REASON = "AuditLogFull"  # KGWE's lines in this month's file reached the bound
LOST_REASON = "AuditEntriesLost"  # more entries waited than are kept
STATUS_KEY = "auditLog"  # status.auditLog: the LogState's record, and the last tampering found


class AuditTrail:
    """The audit log of one PolicyRepository as its reconciler keeps it between passes."""

    def __init__(
        self,
        repository: str,
        *,
        now: Callable[[], datetime],
        is_leader: Callable[[], bool],
        flush_seconds: float,
        open_commit: Callable[[PolicyRepositorySpec, str], CommitBack],
        warn: Callable[[Mapping[str, object], str, str], None],
        rejected: Callable[[], None],
        token: Callable[[], str] = lambda: secrets.token_hex(8),
        max_log_bytes: int = MAX_LOG_BYTES,
    ) -> None:
        self.repository = repository  # namespace/name, as each entry names it
        self.now = now
        self.is_leader = is_leader  # only the leader commits the log
        self.flush_seconds = flush_seconds
        self.open_commit = open_commit  # a CommitBack to the reports branch (may raise GitSourceError)
        self.warn = warn  # a Warning Event on the PolicyRepository: (object, reason, message)
        self.rejected = rejected  # counts a commit the reports branch refused
        self.token = token  # the unguessable part of a file KGWE goes on in
        self.max_log_bytes = max_log_bytes  # KGWE's own lines in one month's file
        self.pending = Pending(MAX_PENDING)
        self.committed_at: datetime | None = None
        self.state: LogState | None = None  # what KGWE wrote, as this process knows it
        self.tampering: dict[str, str] | None = None  # the last tampering found: path, what, when
        self._note: dict[str, Any] | None = None  # the first line of the file KGWE goes on in
        self._tried: LogState | None = None  # the state the last commit's edit started from
        self._appended: Appended | None = None  # what that edit made of the file (last call wins)

    @property
    def entries(self) -> list[AuditEntry]:
        """The entries not committed yet."""
        return self.pending.entries

    def add(self, p: Pass, nodes: Sequence[NodeChange]) -> None:
        """One audit entry for a pass that wrote anything (kept until the log is committed)."""
        if p.stamp is None or p.converged is None or p.spec.reports is None:
            return
        sync = p.sync or SyncResult()
        entry = AuditEntry(
            time=self.now(),
            repository=self.repository,
            stamp=p.stamp,
            applied=p.converged,
            created=[str(r) for r in sync.created],
            updated=[str(r) for r in sync.updated],
            pruned=[str(r) for r in sync.pruned],
            drift_corrected=[str(r) for r in sync.drift_corrected],
            nodes=list(nodes),
            scheduler_restarted=p.scheduler is not None and p.scheduler.outcome == "restarted",
            quotas=_quota_changes(p, sync),
        )
        if not entry.empty and not self.pending.add(entry) and self.pending.dropped == 1:
            self.warn(
                p.repo,
                LOST_REASON,
                f"more than {MAX_PENDING} audit log entries wait to be committed; the ones after are only "
                "counted, and the log will say how many were lost",
            )

    def waiting(self) -> int:
        """How many entries wait to be committed (those past MAX_PENDING count as one: the line saying so)."""
        return len(self.pending.entries) + (1 if self.pending.dropped else 0)

    def files(self, p: Pass, *, due: bool) -> dict[str, Edit]:
        """The audit log's append for a commit (the leader only): when entries wait and the log is `due` (a
        snapshot is committed anyway), or was last committed `flush_seconds` ago or never; else none."""
        self._tried, self._appended = None, None
        if (
            not self.is_leader()
            or p.spec.reports is None
            or not (self.pending.entries or self.pending.dropped)
        ):
            return {}
        now = self.now()
        last = self.committed_at
        if not due and last is not None and now - last < timedelta(seconds=self.flush_seconds):
            return {}
        state = current_state(self._known(p), p.spec.reports_path, now)
        if state.full:
            return {}  # this month's file is closed: the entries wait for the next month's
        records = [*([self._note] if self._note else []), *self.pending.records(now)]
        self._tried = state

        def edit(existing: bytes | None) -> bytes | None:
            self._appended = append(existing, records, now, state, self.max_log_bytes)
            return self._appended.data

        return {state.path: edit}

    def done(self, p: Pass, result: CommitResult) -> None:
        """After a commit that held the audit log: what went in is forgotten and KGWE's state moves on; a
        file not as KGWE left it, or unreadable, is reported and left for a new one (the entries wait, due at
        once); a failed push keeps everything for the next try; a push refused for good drops the entries
        with a Warning saying how many."""
        tried, appended = self._tried, self._appended
        self._tried, self._appended = None, None
        if tried is None:
            return
        self.committed_at = self.now()
        if result.status == "failed":
            return
        if result.status == "rejected":
            if result.refused == tried.path:
                self._move(p, tried, f"cannot be read: {result.reason}")
            else:
                self._drop(p, result.reason)
            return
        if appended is None:  # the edit never ran: the commit held nothing of the log
            return
        if appended.problem is not None:
            self._move(p, tried, appended.problem)
            return
        self.state = appended.state
        kept = appended.kept
        if self._note is not None and kept:
            self._note, kept = None, kept - 1
        self.pending.forget(kept)
        if appended.closed and not tried.full:
            self.warn(
                p.repo,
                FULL_REASON,
                f"audit log {tried.path}: KGWE's lines reached {self.max_log_bytes} bytes, a month's bound; "
                f"{len(self.pending.entries)} entries wait for the next month's file",
            )

    def commit(self, p: Pass, *, due: bool = False) -> None:
        """Commit the waiting audit entries on their own when due, or now when `due` (the controller stops:
        kgwe.reconcile.repository's flush_audit), once more at once when KGWE had to leave the file for a
        new one; then hand KGWE's state to the status."""
        for _ in range(2):
            files = self.files(p, due=due)
            if not files:
                break
            try:
                cb = self.open_commit(p.spec, "commit-back")
            except GitSourceError as exc:
                self._tried = None
                self._drop(p, str(exc))
                break
            result = cb.commit_files(files, summary="audit log")
            if result.status == "rejected":
                self.rejected()
            self.done(p, result)
            if self.committed_at is not None:  # not left for a new file: nothing more to do now
                break
        p.audit_log = self.status()

    def status(self) -> dict[str, Any]:
        """The status this trail adds (merge patch): KGWE's state of the log, and the last tampering found."""
        if self.state is None:
            return {}
        found = {"tampering": self.tampering} if self.tampering else {}  # never cleared: no null to compare
        return {STATUS_KEY: {**self.state.record(), **found}}

    def _known(self, p: Pass) -> LogState | None:
        """KGWE's state of the log: this process's, or the status's when that is newer (another replica led
        since, or this process has just started)."""
        raw = p.status.get(STATUS_KEY)
        stored = LogState.from_record(raw)
        if stored is not None and (self.state is None or stored.seq > self.state.seq):
            self.state = stored
            found = raw.get("tampering") if isinstance(raw, Mapping) else None
            self.tampering = found if isinstance(found, dict) else None
        return self.state

    def _move(self, p: Pass, left: LogState, problem: str) -> None:
        """Leave `left`'s file as it is, as evidence, for a new file of the month: reported, due at once."""
        now = self.now()
        self.state = moved_state(left, p.spec.reports_path, now, self.token())
        self.tampering = {"path": left.path, "found": problem, "time": format_rfc3339(now)}
        self._note = moved_record(now, left.path, problem)
        self.committed_at = None
        self.warn(
            p.repo,
            TAMPERED_REASON,
            f"audit log {left.path} {problem}; it is left as it is, KGWE's log goes on in {self.state.path}",
        )

    def _drop(self, p: Pass, reason: str) -> None:
        count = self.waiting()
        self.warn(p.repo, REJECTED_REASON, f"audit log: {reason}; {count} waiting line(s) not logged")
        self.pending = Pending(MAX_PENDING)
        self._note = None


def _quota_changes(p: Pass, sync: SyncResult) -> list[QuotaChange]:
    """The budget quotas this pass wrote, each with whether an Enforce budget capped it."""
    written = {(r.namespace, r.name) for r in sync.applied if r.kind == "ResourceQuota"}
    return [
        QuotaChange(
            ns,
            ns in p.quota_caps,
            {str(k): str(v) for k, v in ((q.get("spec") or {}).get("hard") or {}).items()},
        )
        for q in p.quotas
        if (ns := (q.get("metadata") or {}).get("namespace", ""), BUDGET_QUOTA_NAME) in written
    ]
