"""The audit duty of a PolicyRepository's reconciler (docs/audit.md): one entry per pass that wrote anything,
kept until the leader appends the waiting entries to `<reports path>/audit/<YYYY-MM>.jsonl` — with the next
inventory snapshot, or on their own at most every `flush_seconds` (kgwe.audit.log).

The reconciler hands each pass over as its plain record (kgwe.reconcile.summary.Pass) with the Node writes
the pass made; this class reads nothing from the cluster and holds no client, only the waiting entries and
when they were last committed."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from kgwe.audit.log import MAX_PENDING, AuditEntry, NodeChange, Pending, QuotaChange, append
from kgwe.cluster.apply import SyncResult
from kgwe.gitops.commit_back import CommitBack, Edit
from kgwe.gitops.source import GitSourceError
from kgwe.policy.cluster_kinds import PolicyRepositorySpec
from kgwe.reconcile.summary import Pass
from kgwe.vocab import BUDGET_QUOTA_NAME

REJECTED_REASON = "CommitBackRejected"  # the Warning's reason when the reports branch refuses a commit


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
    ) -> None:
        self.repository = repository  # namespace/name, as each entry names it
        self.now = now
        self.is_leader = is_leader  # only the leader commits the log
        self.flush_seconds = flush_seconds
        self.open_commit = open_commit  # a CommitBack to the reports branch (may raise GitSourceError)
        self.warn = warn  # a Warning Event on the PolicyRepository: (object, reason, message)
        self.rejected = rejected  # counts a commit the reports branch refused
        self.pending = Pending(MAX_PENDING)
        self.committed_at: datetime | None = None

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
        if not entry.empty:
            self.pending.add(entry)

    def files(self, spec: PolicyRepositorySpec, *, due: bool) -> dict[str, Edit]:
        """The audit log's appends for a commit (the leader only): when entries wait and the log is `due` (a
        snapshot is committed anyway), or was last committed `flush_seconds` ago or never; else none."""
        if not self.is_leader() or spec.reports is None or not (self.pending.entries or self.pending.dropped):
            return {}
        now = self.now()
        last = self.committed_at
        if not due and last is not None and now - last < timedelta(seconds=self.flush_seconds):
            return {}
        return {
            path: _appender(lines, now)
            for path, lines in self.pending.by_file(spec.reports_path, now).items()
        }

    def done(self, status: str) -> None:
        """After a commit that held the audit log: what was appended (or refused for good) is forgotten;
        a failed push keeps it for the next try."""
        self.committed_at = self.now()
        if status != "failed":
            self.pending = Pending(MAX_PENDING)

    def commit(self, p: Pass) -> None:
        """Commit the waiting audit entries on their own when due."""
        files = self.files(p.spec, due=False)
        if not files:
            return
        try:
            cb = self.open_commit(p.spec, "commit-back")
        except GitSourceError as exc:
            self.warn(p.repo, REJECTED_REASON, f"audit log: {exc}")
            self.done("rejected")
            return
        result = cb.commit_files(files, summary="audit log")
        self.done(result.status)
        if result.status == "rejected":
            self.rejected()
            self.warn(p.repo, REJECTED_REASON, f"audit log: {result.reason}")


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


def _appender(lines: Sequence[str], when: datetime) -> Edit:
    """The Edit that appends `lines` to a month's audit log as the branch holds it (kgwe.audit.log)."""
    return lambda existing: append(existing, lines, when)[0]
