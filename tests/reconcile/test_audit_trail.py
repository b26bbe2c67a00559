"""The reconciler's audit duty on plain data (kgwe.reconcile.audit_trail): which passes leave an entry, when
the waiting entries are due for a commit, and what a commit's outcome keeps. Committing to a real Git
server: tests/reconcile/test_audit_e2e.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from kgwe.audit.log import NodeChange
from kgwe.audit.stamp import Stamp
from kgwe.cluster.apply import ObjectRef, SyncResult
from kgwe.gitops.commit_back import CommitBack, CommitResult
from kgwe.policy.cluster_kinds import PolicyRepositorySpec
from kgwe.reconcile.audit_trail import AuditTrail
from kgwe.reconcile.rebalancing import RebalanceResult
from kgwe.reconcile.summary import Pass
from kgwe.vocab import BUDGET_QUOTA_NAME

SHA = "0123456789abcdef0123456789abcdef01234567"
T0 = datetime(2026, 11, 15, 12, 0, tzinfo=UTC)
FLUSH_SECONDS = 300.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _no_commit(spec: PolicyRepositorySpec, workdir: str) -> CommitBack:
    raise AssertionError("deciding what is due opens no commit")


def trail(clock: Clock, leader: list[bool]) -> AuditTrail:
    return AuditTrail(
        "kgwe-system/fleet",
        now=clock,
        is_leader=lambda: leader[0],
        flush_seconds=FLUSH_SECONDS,
        open_commit=_no_commit,
        warn=lambda obj, reason, message: None,
        rejected=lambda: None,
    )


def quota(namespace: str, gpus: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": BUDGET_QUOTA_NAME, "namespace": namespace},
        "spec": {"hard": {"requests.nvidia.com/gpu": gpus}},
    }


def a_pass(*, reports: bool = True, sync: SyncResult | None = None, stamped: bool = True) -> Pass:
    spec = PolicyRepositorySpec.model_validate(
        {
            "url": "https://git.example/fleet.git",
            "path": "policy",
            **({"reports": {"path": "reports"}} if reports else {}),
        }
    )
    stamp = Stamp.of("main", SHA, "Ada", "ada@example.com")
    return Pass(
        {"metadata": {"name": "fleet", "namespace": "kgwe-system"}},
        spec,
        RebalanceResult(),
        stamp=stamp if stamped else None,
        converged=stamp.revision if stamped else None,
        sync=sync,
        quotas=[quota("team-a", "4"), quota("team-b", "8")],
        quota_caps={"team-a": 4},
    )


def wrote() -> SyncResult:
    return SyncResult(
        created=[ObjectRef("v1", "ConfigMap", "gpu-operator", "mig-parted")],
        updated=[ObjectRef("v1", "ResourceQuota", "team-a", BUDGET_QUOTA_NAME)],
    )


def test_a_pass_that_wrote_leaves_one_entry_naming_writes_nodes_and_capped_quotas():
    clock, leader = Clock(), [True]
    t = trail(clock, leader)
    t.add(a_pass(sync=wrote()), [NodeChange("gpu-1", "relabel", "nvidia.com/mig.config", "all-1g.10gb")])
    (entry,) = t.entries
    record = json.loads(entry.line())
    assert record["repository"] == "kgwe-system/fleet"
    assert record["applied"] == f"main@sha1:{SHA}"
    assert entry.created == ["ConfigMap/gpu-operator/mig-parted"]
    assert [(q.namespace, q.capped) for q in entry.quotas] == [("team-a", True)]  # team-b was not written
    assert [n.node for n in entry.nodes] == ["gpu-1"]


def test_passes_that_wrote_nothing_or_have_no_reports_or_stamp_leave_none():
    clock, leader = Clock(), [True]
    t = trail(clock, leader)
    t.add(a_pass(sync=SyncResult()), [])
    t.add(a_pass(sync=wrote(), reports=False), [NodeChange("gpu-1", "cordon")])
    t.add(a_pass(sync=wrote(), stamped=False), [])
    assert t.entries == []


def test_the_log_is_due_at_once_with_a_snapshot_else_every_flush_interval_and_for_the_leader_only():
    clock, leader = Clock(), [True]
    t = trail(clock, leader)
    p = a_pass()
    assert t.files(p, due=True) == {}  # nothing waits
    t.add(a_pass(sync=wrote()), [])
    (edit,) = t.files(p, due=False).values()  # never committed yet
    assert list(t.files(p, due=False)) == ["reports/audit/2026-11.jsonl"]
    edit(None)
    t.done(p, CommitResult("pushed", SHA, 1))
    assert t.entries == []
    t.add(a_pass(sync=wrote()), [])
    clock.now += timedelta(seconds=FLUSH_SECONDS - 1)
    assert t.files(p, due=False) == {}  # committed less than an interval ago
    assert list(t.files(p, due=True)) == ["reports/audit/2026-11.jsonl"]  # with a snapshot: now
    clock.now += timedelta(seconds=1)
    assert list(t.files(p, due=False)) == ["reports/audit/2026-11.jsonl"]
    leader[0] = False
    assert t.files(p, due=True) == {}


def commit_one(t: AuditTrail, p: Pass, existing: bytes | None, status: str) -> bytes | None:
    """One more entry, committed with the outcome `status`: the bytes the edit made of `existing`."""
    t.add(a_pass(sync=wrote()), [])
    (edit,) = t.files(p, due=False).values()
    data = edit(existing)
    t.done(p, CommitResult(status, SHA if status == "pushed" else None, 1, ""))  # type: ignore[arg-type]
    return data


def test_a_failed_push_keeps_the_entries_and_the_edit_appends_to_what_the_branch_holds():
    clock, leader = Clock(), [True]
    t = trail(clock, leader)
    p = a_pass()
    assert commit_one(t, p, None, "failed") is not None
    assert len(t.entries) == 1 and t.state is None  # tried again with the next commit, from the same state
    clock.now += timedelta(seconds=FLUSH_SECONDS)
    appended = commit_one(t, p, None, "pushed")
    assert appended is not None and len(appended.splitlines()) == 2
    assert t.entries == [] and t.state is not None and t.state.lines == 2
    clock.now += timedelta(seconds=FLUSH_SECONDS)
    assert commit_one(t, p, appended, "rejected") is not None  # refused for good: not retried
    assert t.entries == []


def test_kgwe_s_state_of_the_log_goes_to_status_and_is_taken_back_from_it():
    """A restarted controller (or a new leader) knows what KGWE wrote from the status the last one left."""
    clock, leader = Clock(), [True]
    t = trail(clock, leader)
    data = commit_one(t, a_pass(), None, "pushed")
    status = t.status()["auditLog"]
    assert status["path"] == "reports/audit/2026-11.jsonl" and status["lines"] == 1
    assert "tampering" not in status  # none found: nothing a status read back would lack

    later = trail(clock, leader)
    q = a_pass()
    q.repo = {**q.repo, "status": {"auditLog": status}}
    assert commit_one(later, q, data, "pushed") is not None  # under the status's state: nothing found
    assert later.state is not None and later.state.lines == 2 and later.tampering is None


class Branch:
    """The reports branch as the trail's commit sees it: each commit's edits applied to what it holds."""

    def __init__(self) -> None:
        self.files: dict[str, bytes | None] = {}
        self.commits = 0

    def commit_files(self, files, summary: str) -> CommitResult:
        for path, edit in files.items():
            self.files[path] = edit(self.files.get(path))
        self.commits += 1
        return CommitResult("pushed", SHA, 1)


def test_entries_waiting_when_the_controller_stops_are_committed_at_once_not_lost():
    """commit(due=True), as the stopping leader calls it: the flush interval does not hold them back."""
    clock, leader, branch = Clock(), [True], Branch()
    t = trail(clock, leader)
    t.open_commit = lambda spec, workdir: branch  # type: ignore[assignment,return-value]
    t.add(a_pass(sync=wrote()), [])
    t.commit(a_pass())  # never committed: due
    assert branch.commits == 1 and t.waiting() == 0
    t.add(a_pass(sync=wrote()), [])
    clock.now += timedelta(seconds=1)
    p = a_pass()
    t.commit(p)  # within the interval: waits
    assert branch.commits == 1 and t.waiting() == 1
    t.commit(p, due=True)
    assert branch.commits == 2 and t.waiting() == 0
    (data,) = branch.files.values()
    assert data is not None and len(data.splitlines()) == 2
    assert p.audit_log["auditLog"]["lines"] == 2  # KGWE's state of the log, for the status
