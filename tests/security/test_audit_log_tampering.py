"""A committer can neither silence nor forge the audit log (docs/audit.md). What KGWE wrote is its own state,
kept in the PolicyRepository's status: a committed line saying the month is full, padding to the size cap,
a file too large or not a file at all, a line of KGWE's changed or removed — each is found, reported (a
Warning and `status.auditLog.tampering`), the file left as the committer made it, and KGWE's lines go on in
a new file of the month nobody could plant beforehand. Nothing waiting is dropped without a Warning.
(Before, the first two stopped KGWE logging for the month and dropped the waiting entries silently; a file
over the edit bound dropped them with a Warning, every time.)

The trail commits through the real commit-back to a real Git repository; the status a pass leaves is handed
to the next as the reconciler's status write does."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kgwe.audit.log import CHAIN_KEY, MAX_PENDING, is_log_path
from kgwe.audit.stamp import Stamp
from kgwe.cluster.apply import ObjectRef, SyncResult
from kgwe.gitops.commit_back import MAX_EDITED_BYTES, CommitBack
from kgwe.policy.cluster_kinds import PolicyRepositorySpec
from kgwe.reconcile.audit_trail import FULL_REASON, LOST_REASON, TAMPERED_REASON, AuditTrail
from kgwe.reconcile.rebalancing import RebalanceResult
from kgwe.reconcile.summary import Pass
from tests.security.conftest import Repo, sh_git

SHA = "0123456789abcdef0123456789abcdef01234567"
REPOSITORY = "kgwe-system/fleet"


class Controller:
    """The audit duty of one reconciler against `repo`, and the status its passes leave."""

    def __init__(self, repo: Repo, workdir: Path, **options: object) -> None:
        self.repo = repo
        self.status: dict[str, object] = {}
        self.warnings: list[tuple[str, str]] = []
        self.trail = AuditTrail(
            REPOSITORY,
            now=lambda: datetime.now(UTC),
            is_leader=lambda: True,
            flush_seconds=0.0,
            open_commit=lambda spec, name: CommitBack(
                str(repo.bare), "main", workdir=workdir, allow_local=True, allowed_prefixes=("reports/",)
            ),
            warn=lambda obj, reason, message: self.warnings.append((reason, message)),
            rejected=lambda: None,
            **options,  # type: ignore[arg-type]
        )

    def a_pass(self, wrote: str = "ConfigMap/gpu-operator/a") -> None:
        """A pass that wrote one object, then the trail's commit and the status write."""
        spec = PolicyRepositorySpec.model_validate(
            {"url": "https://git.example/fleet.git", "path": "policy", "reports": {"path": "reports"}}
        )
        stamp = Stamp.of("main", SHA, "Ada", "ada@example.com")
        p = Pass(
            {"metadata": {"name": "fleet", "namespace": "kgwe-system"}, "status": dict(self.status)},
            spec,
            RebalanceResult(),
            stamp=stamp,
            converged=stamp.revision,
            sync=SyncResult(created=[ObjectRef("v1", *wrote.split("/"))]),  # type: ignore[arg-type]
        )
        self.trail.add(p, [])
        self.trail.commit(p)
        self.status.update(p.audit_log)

    def tampering(self) -> list[str]:
        return [message for reason, message in self.warnings if reason == TAMPERED_REASON]


def month_file() -> str:
    return f"reports/audit/{datetime.now(UTC):%Y-%m}.jsonl"


def logs(repo: Repo) -> dict[str, list[dict]]:
    """Every audit log file on the branch, as JSON lines (lines that are not JSON objects skipped)."""
    names = sh_git(repo.bare, "ls-tree", "-r", "--name-only", "main", "reports").split()
    out = {}
    for name in filter(is_log_path, names):
        mode = repo.mode(name)
        if mode != "100644":
            continue
        text = subprocess.run(
            ["git", "show", f"main:{name}"], cwd=repo.bare, capture_output=True, check=True
        ).stdout
        out[name] = [
            json.loads(line) for line in text.splitlines() if line.startswith(b"{") and line.endswith(b"}")
        ]
    return out


def kgwe_lines(repo: Repo) -> list[dict]:
    return [line for lines in logs(repo).values() for line in lines if line.get("repository") == REPOSITORY]


def plant(repo: Repo, content: bytes | None = None, link: str | None = None) -> str:
    """The committer's commit of this month's audit file: `content`, or a symlink to `link`."""
    path = repo.work / month_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if link is not None:
        os.symlink(link, path)
    else:
        path.write_bytes(content or b"")
    sh_git(repo.work, "add", "-A")
    sh_git(repo.work, "commit", "-qm", "the log")
    sh_git(repo.work, "pull", "-q", "--rebase", "origin", "main")
    sh_git(repo.work, "push", "-q", "origin", "HEAD:main")
    return sh_git(repo.bare, "rev-parse", f"main:{month_file()}")


PLANTS = {
    "a line saying the month is full": b'{"logFull": true, "maxBytes": 4194304}\n',
    "padding to the size cap": b"x" * (4 * 1024 * 1024) + b"\n",
    "a file over the edit bound": b"y" * (MAX_EDITED_BYTES + 1),
}


@pytest.mark.parametrize("planted", list(PLANTS), ids=list(PLANTS))
def test_a_planted_file_neither_silences_nor_hides_kgwe_s_lines(policy_repo: Repo, tmp_path: Path, planted):
    policy_repo.push({"policy/README.md": "policy\n"})
    blob = plant(policy_repo, PLANTS[planted])
    controller = Controller(policy_repo, tmp_path / "cb")
    controller.a_pass()
    assert [line["objects"]["created"]["names"] for line in kgwe_lines(policy_repo)] == [
        ["ConfigMap/gpu-operator/a"]
    ]
    assert controller.trail.entries == []  # nothing waits, nothing was dropped
    assert sh_git(policy_repo.bare, "rev-parse", f"main:{month_file()}") == blob  # left as planted
    (warning,) = controller.tampering()
    assert month_file() in warning
    status = controller.status["auditLog"]
    assert status["tampering"]["path"] == month_file() and status["path"] != month_file()
    (moved,) = [name for name in logs(policy_repo) if name != month_file()]
    assert moved == status["path"] and logs(policy_repo)[moved][0]["continuesFrom"] == month_file()


def test_a_planted_symlink_neither_silences_nor_redirects_the_log(policy_repo: Repo, tmp_path: Path):
    policy_repo.push({"policy/README.md": "policy\n"})
    plant(policy_repo, link="../../policy/README.md")
    controller = Controller(policy_repo, tmp_path / "cb")
    controller.a_pass()
    assert len(kgwe_lines(policy_repo)) == 1 and controller.trail.entries == []
    assert policy_repo.mode(month_file()) == "120000" and policy_repo.show("policy/README.md") == "policy"
    assert len(controller.tampering()) == 1


def test_kgwe_s_lines_changed_or_removed_are_found_and_left_as_evidence(policy_repo: Repo, tmp_path: Path):
    policy_repo.push({"policy/README.md": "policy\n"})
    controller = Controller(policy_repo, tmp_path / "cb")
    controller.a_pass("ConfigMap/gpu-operator/a")
    controller.a_pass("ConfigMap/gpu-operator/b")
    assert controller.tampering() == [] and len(kgwe_lines(policy_repo)) == 2
    first_file = controller.status["auditLog"]["path"]

    # The committer rewrites who did the first change, keeping the chain field as it was.
    sh_git(policy_repo.work, "pull", "-q", "--rebase", "origin", "main")
    path = policy_repo.work / first_file
    lines = path.read_text().splitlines(keepends=True)
    forged = json.loads(lines[0])
    forged["author"] = "Someone Else <s@example.com>"
    path.write_text(json.dumps(forged, separators=(",", ":")) + "\n" + "".join(lines[1:]))
    sh_git(policy_repo.work, "commit", "-qam", "tidy the log")
    sh_git(policy_repo.work, "push", "-q", "origin", "HEAD:main")
    forged_blob = sh_git(policy_repo.bare, "rev-parse", f"main:{first_file}")

    controller.a_pass("ConfigMap/gpu-operator/c")
    (warning,) = controller.tampering()
    assert first_file in warning and "its hash chain breaks at line 2" in warning
    assert sh_git(policy_repo.bare, "rev-parse", f"main:{first_file}") == forged_blob  # evidence kept
    new_file = controller.status["auditLog"]["path"]
    new = logs(policy_repo)[new_file]
    assert new[0]["continuesFrom"] == first_file and new[1]["objects"]["created"]["names"] == [
        "ConfigMap/gpu-operator/c"
    ]

    # Removing KGWE's line in the new file is found the same way.
    sh_git(policy_repo.work, "pull", "-q", "--rebase", "origin", "main")
    (policy_repo.work / new_file).write_text("")
    sh_git(policy_repo.work, "commit", "-qam", "nothing to see")
    sh_git(policy_repo.work, "push", "-q", "origin", "HEAD:main")
    controller.a_pass("ConfigMap/gpu-operator/d")
    assert len(controller.tampering()) == 2 and new_file in controller.tampering()[1]
    assert "holds 0 line(s) where KGWE wrote 2" in controller.tampering()[1]


def test_a_restarted_controller_checks_the_file_against_the_status(policy_repo: Repo, tmp_path: Path):
    """KGWE's state outlives the process: a new one reads it from status and still finds a forged line."""
    policy_repo.push({"policy/README.md": "policy\n"})
    first = Controller(policy_repo, tmp_path / "cb1")
    first.a_pass()
    path = first.status["auditLog"]["path"]
    sh_git(policy_repo.work, "pull", "-q", "--rebase", "origin", "main")
    with (policy_repo.work / path).open("a") as log:  # a forged line of KGWE's, chained correctly
        head = first.status["auditLog"]["head"]
        log.write(
            json.dumps({"time": "2026-01-01T00:00:00Z", "repository": REPOSITORY, CHAIN_KEY: head}) + "\n"
        )
    sh_git(policy_repo.work, "commit", "-qam", "one more")
    sh_git(policy_repo.work, "push", "-q", "origin", "HEAD:main")

    second = Controller(policy_repo, tmp_path / "cb2")
    second.status = dict(first.status)
    second.a_pass()
    (warning,) = second.tampering()
    assert path in warning and "holds 1 line(s) KGWE did not write" in warning


def test_nothing_waiting_is_dropped_without_a_warning(policy_repo: Repo, tmp_path: Path):
    policy_repo.push({"policy/README.md": "policy\n"})
    small = Controller(policy_repo, tmp_path / "cb", max_log_bytes=2000)
    for i in range(6):
        small.a_pass(f"ConfigMap/gpu-operator/n{i}")
    full = [message for reason, message in small.warnings if reason == FULL_REASON]
    assert len(full) == 1 and "entries wait for the next month's file" in full[0]
    assert small.trail.entries  # still waiting, not dropped
    closing = logs(policy_repo)[month_file()][-1]
    assert closing["logFull"] is True

    crowded = Controller(policy_repo, tmp_path / "cb2")
    p_count = MAX_PENDING + 3
    spec = {"url": "https://git.example/fleet.git", "path": "policy", "reports": {"path": "reports"}}
    stamp = Stamp.of("main", SHA, "Ada", "ada@example.com")
    for i in range(p_count):
        p = Pass(
            {"metadata": {"name": "fleet"}},
            PolicyRepositorySpec.model_validate(spec),
            RebalanceResult(),
            stamp=stamp,
            converged=stamp.revision,
            sync=SyncResult(created=[ObjectRef("v1", "ConfigMap", "x", f"c{i}")]),
        )
        crowded.trail.add(p, [])
    lost = [message for reason, message in crowded.warnings if reason == LOST_REASON]
    assert len(lost) == 1 and str(MAX_PENDING) in lost[0]
    assert crowded.trail.pending.dropped == 3
