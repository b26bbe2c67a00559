"""Commit files (reports, the inventory snapshot) back to the policy repository, safely.

Rules, from what went wrong for others (Flux image automation force-pushes by default; Argo CD Image
Updater had to fix update loops and concurrent writers):
- a bot author and a message template; never an empty commit (nothing changed → nothing pushed);
- fetch → commit → push; when the branch moved meanwhile, fetch and rebase onto it and push again, a bounded
  number of times; never a force push, so a concurrent human commit is kept, not overwritten;
- a push the server refuses for good (hook, protected branch, permissions) is returned as `rejected` at once
  and not retried; the caller reports it in status and metrics;
- by default only paths under `reports/` may be written, and the reconciler ignores commits that touch only
  `reports/`, so commit-back can never trigger a reconcile of its own output.

Usage (engineer E, cost reports):

    cb = CommitBack(url, "main", workdir=Path("/var/cache/kgwe/commit-back"))
    result = cb.commit_files({"reports/prod/chargeback-2026-11.md": text}, summary="chargeback 2026-11")
    if result.status == "rejected": ...   # result.reason tells why; do not retry
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

import git
from prometheus_client import Counter

from kgwe.errors import KgweError
from kgwe.gitops.auth import GitCredentials, git_environment
from kgwe.gitops.retry import backoff_delays_seconds
from kgwe.gitops.source import _git_error_text, normalize_url

COMMIT_BACK_RESULTS = Counter("kgwe_commit_back_total", "Commit-back attempts by final result", ["result"])

DEFAULT_MESSAGE_TEMPLATE = "kgwe: {summary}\n\n{details}Files:\n{files}\n\nKgwe-Bot: commit-back"

# Push outcomes `git push --porcelain` prints per ref. "rejected (fetch first|non-fast-forward)" means the
# branch moved: rebase and retry. "remote rejected" means a hook or branch protection said no: permanent.
_MOVED_MARKERS = ("fetch first", "non-fast-forward", "stale info", "cannot lock ref", "failed to update ref")
_PERMANENT_MARKERS = (
    "remote rejected",
    "permission denied",
    "authentication failed",
    "error: 403",
    "protected branch",
    "could not read from remote repository",
    "repository not found",
    "access denied",
)


@dataclass(frozen=True)
class BotIdentity:
    name: str = "kgwe-bot"
    email: str = "kgwe-bot@users.noreply.kgwe.nvidia.io"


@dataclass(frozen=True)
class CommitResult:
    status: Literal["pushed", "unchanged", "rejected", "failed"]
    sha: str | None  # the pushed commit (pushed) or the branch head (unchanged)
    attempts: int  # push attempts made
    reason: str = ""  # for rejected/failed: the server's words


class CommitBack:
    """Writes files to `branch` of the repository at `url` through a private clone in `workdir`."""

    def __init__(
        self,
        url: str,
        branch: str,
        *,
        workdir: Path,
        credentials: GitCredentials | None = None,
        author: BotIdentity = BotIdentity(),
        message_template: str = DEFAULT_MESSAGE_TEMPLATE,
        allowed_prefixes: tuple[str, ...] = ("reports/",),
        attempts: int = 4,
        timeout_seconds: float = 60.0,
        backoff_base_seconds: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not branch or branch.startswith("-") or ".." in branch:
            raise KgweError(f"invalid commit-back branch {branch!r}")
        self.url = normalize_url(url)
        self.branch = branch
        self.workdir = Path(workdir)
        self.credentials = credentials
        self.author = author
        self.message_template = message_template
        self.allowed_prefixes = tuple(p.strip("/") + "/" for p in allowed_prefixes)
        self.attempts = max(1, attempts)
        self.timeout_seconds = timeout_seconds
        self.backoff_base_seconds = backoff_base_seconds
        self._sleep = sleep
        self._repo: git.Repo | None = None

    # -- git plumbing -------------------------------------------------------------------------------
    @property
    def repo(self) -> git.Repo:
        if self._repo is None:
            if (self.workdir / ".git").is_dir():
                self._repo = git.Repo(self.workdir)
            else:
                self.workdir.mkdir(parents=True, exist_ok=True)
                self._repo = git.Repo.init(self.workdir)
        return self._repo

    def _git(self, *args: str, network: bool = False) -> str:
        env = {
            "GIT_AUTHOR_NAME": self.author.name,
            "GIT_AUTHOR_EMAIL": self.author.email,
            "GIT_COMMITTER_NAME": self.author.name,
            "GIT_COMMITTER_EMAIL": self.author.email,
        }
        with git_environment(
            self.credentials if network else None, connect_timeout_seconds=int(self.timeout_seconds)
        ) as extra:
            env.update(extra)
            return self.repo.git.execute(
                ["git", *args], env=env, kill_after_timeout=self.timeout_seconds if network else None
            )

    def _fetch(self) -> str:
        remote_ref = f"refs/remotes/origin/{self.branch}"
        self._git(
            "fetch",
            "--force",
            "--no-tags",
            "--no-write-fetch-head",
            self.url,
            f"+refs/heads/{self.branch}:{remote_ref}",
            network=True,
        )
        return self._git("rev-parse", "--verify", remote_ref)

    def _check_path(self, path: str) -> str:
        norm = PurePosixPath(path)
        if norm.is_absolute() or ".." in norm.parts or not norm.parts:
            raise KgweError(f"commit-back path {path!r} must be relative and stay inside the repository")
        text = str(norm)
        if self.allowed_prefixes and not text.startswith(self.allowed_prefixes):
            allowed = ", ".join(self.allowed_prefixes)
            raise KgweError(f"commit-back may only write under {allowed}; refusing {text!r}")
        return text

    def _write(self, files: Mapping[str, str | bytes | None]) -> list[str]:
        written, removed = [], []
        for rel, content in files.items():
            target = self.workdir / rel
            if content is None:
                target.unlink(missing_ok=True)
                removed.append(rel)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content.encode() if isinstance(content, str) else content)
                written.append(rel)
        if written:
            self._git("add", "--", *written)
        if removed:
            self._git("rm", "--cached", "--quiet", "--ignore-unmatch", "--", *removed)
        return written + removed

    def _staged_changes(self) -> bool:
        try:
            self._git("diff", "--cached", "--quiet")
            return False
        except git.GitCommandError as exc:
            if exc.status == 1:
                return True
            raise

    # -- the one public operation -----------------------------------------------------------------
    def commit_files(
        self,
        files: Mapping[str, str | bytes | None],
        *,
        summary: str,
        details: str = "",
        values: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Make `branch` hold `files` (content, or None to delete) in one bot commit, pushed without force."""
        if not files:
            raise KgweError("commit-back needs at least one file")
        checked = {self._check_path(p): c for p, c in files.items()}
        result = self._commit_files(checked, summary=summary, details=details, values=values or {})
        COMMIT_BACK_RESULTS.labels(result.status).inc()
        return result

    def _commit_files(
        self,
        files: Mapping[str, str | bytes | None],
        *,
        summary: str,
        details: str,
        values: Mapping[str, str],
    ) -> CommitResult:
        fields = {
            **values,
            "summary": summary,
            "details": (details.rstrip() + "\n\n") if details else "",
            "files": "\n".join(f"- {p}" for p in sorted(files)),
            "branch": self.branch,
        }
        try:
            message = self.message_template.format_map(fields)
        except (KeyError, IndexError, ValueError) as exc:
            raise KgweError(f"commit message template is invalid: {exc}") from exc

        delays = backoff_delays_seconds(
            self.attempts, base_seconds=self.backoff_base_seconds, rng=random.Random()
        )
        attempts = 0
        last_reason = ""
        committed = False
        while attempts < self.attempts:
            try:
                remote_head = self._fetch()
                if not committed:
                    # Start clean from the remote branch: no leftovers from an earlier failed attempt.
                    self._git("checkout", "--force", "-B", "kgwe-commit-back", remote_head)
                    self._git("clean", "-fdx")
                    self._write(files)
                    if not self._staged_changes():
                        return CommitResult("unchanged", remote_head, attempts)
                    self._git("commit", "--no-verify", "--no-gpg-sign", "-m", message)
                    committed = True
                elif not self._rebase_onto(remote_head, files, message):
                    return CommitResult("unchanged", remote_head, attempts)
                attempts += 1
                self._git("push", "--porcelain", self.url, f"HEAD:refs/heads/{self.branch}", network=True)
                return CommitResult("pushed", self._git("rev-parse", "HEAD"), attempts)
            except git.GitCommandError as exc:
                text = _push_text(exc)
                last_reason = _push_reason(exc)
                lowered = text.lower()
                moved = any(marker in lowered for marker in _MOVED_MARKERS)
                if not moved and any(marker in lowered for marker in _PERMANENT_MARKERS):
                    return CommitResult("rejected", None, max(attempts, 1), last_reason)
                if not moved and not committed:
                    attempts += 1  # a fetch failure also spends an attempt, so a dead remote ends the loop
                delay = next(delays, None)
                if delay is None:
                    break
                self._sleep(delay)
        return CommitResult("failed", None, attempts, last_reason or "gave up after retries")

    def _rebase_onto(self, remote_head: str, files: Mapping[str, str | bytes | None], message: str) -> bool:
        """Replay our commit on the moved branch; False when the branch already holds our content."""
        try:
            self._git("rebase", "--no-autosquash", remote_head)
        except git.GitCommandError:
            # Someone changed the same report: ours is a function of its inputs, so rewrite it on top.
            self._git("rebase", "--abort")
            self._git("checkout", "--force", "-B", "kgwe-commit-back", remote_head)
            self._write(files)
            if not self._staged_changes():
                return False
            self._git("commit", "--no-verify", "--no-gpg-sign", "-m", message)
            return True
        # A rebase that leaves nothing new (identical content already pushed) must not push an empty commit.
        return self._git("rev-parse", "HEAD") != remote_head

    def reset(self) -> None:
        """Drop the private clone (e.g. after the remote was replaced)."""
        self._repo = None
        shutil.rmtree(self.workdir, ignore_errors=True)


def _push_reason(exc: git.GitCommandError) -> str:
    """What the server said: porcelain `!` ref lines and `remote:` messages, else git's last error line."""
    parts = []
    for line in _push_text(exc).splitlines():
        line = line.strip().removeprefix("stderr: ").removeprefix("stdout: ").strip("'").strip()
        if line.startswith("!"):
            parts.append(line.split("\t")[-1])
        elif line.startswith("remote:") and line.removeprefix("remote:").strip():
            parts.append(line.removeprefix("remote:").strip())
    return "; ".join(parts) or _git_error_text(exc)


def _push_text(exc: git.GitCommandError) -> str:
    out = exc.stdout if isinstance(exc.stdout, str) else ""
    err = exc.stderr if isinstance(exc.stderr, str) else ""
    return f"{out}\n{err}"


__all__ = ["DEFAULT_MESSAGE_TEMPLATE", "BotIdentity", "CommitBack", "CommitResult"]
