"""Commit files (reports, the inventory snapshot) back to the policy repository, safely.

Rules, from what went wrong for others (Flux image automation force-pushes by default; Argo CD Image
Updater had to fix update loops and concurrent writers):
- a bot author and a message template; never an empty commit (nothing changed → nothing pushed);
- fetch → commit → push; when the branch moved meanwhile, fetch and rebase onto it and push again, a bounded
  number of times; never a force push, so a concurrent human commit is kept, not overwritten;
- a push the server refuses for good (hook, protected branch, permissions) is returned as `rejected` at once
  and not retried; the caller reports it in status and metrics;
- only paths under the allowed prefixes may be written (the controller passes the PolicyRepository's
  `reports.path`, which the model keeps outside the policy path), and the reconciler ignores commits that
  touch only `reports/`, so commit-back can never trigger a reconcile of its own output;
- a file may also be given as an edit of what the branch holds (an append-only log): the edit gets the
  file's bytes at the commit it builds on, again after every rebase, so a concurrent writer's lines are
  kept; only a regular file of at most MAX_EDITED_BYTES is read for it;
- files are written with git plumbing (hash-object, update-index on a private index, commit-tree), never
  through a working tree: a repository holding `reports/x.yaml -> /var/cache/kgwe/kgwe-cost.db` cannot
  make the controller write to that file, and a report folder that is a symlink in the repository is
  refused.

Usage (the cost reports):

    cb = CommitBack(url, "main", workdir=Path("/var/cache/kgwe/commit-back"))
    result = cb.commit_files({"reports/prod/chargeback-2026-11.md": text}, summary="chargeback 2026-11")
    if result.status == "rejected": ...   # result.reason tells why; do not retry
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Literal

import git
from prometheus_client import Counter

from kgwe.errors import KgweError
from kgwe.gitops.auth import GitCredentials, git_environment
from kgwe.gitops.gitcmd import (
    LOOPBACK_NETWORKS,
    Network,
    UnsafeGitArgument,
    check_argument,
    check_url,
    git_failure,
    operator_networks,
    run_git,
)
from kgwe.gitops.retry import backoff_delays_seconds
from kgwe.gitops.source import GitSourceError, list_tree
from kgwe.vocab import DEFAULT_REPORTS_PATH

MAX_COMMIT_BACK_FILES = 200_000  # files of the repository commit-back reads into its index (a large monorepo)
MAX_EDITED_BYTES = 8 * 1024 * 1024  # a file commit-back reads to edit (the audit log: 4 MiB a month)
# A file's new content from its content at the commit written on (None: the file is absent there); None
# removes it.
Edit = Callable[[bytes | None], bytes | None]
Content = str | bytes | None | Edit
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
    refused: str | None = None  # rejected because this edited file could not be read (a link, too large)


class _Refused(KgweError):
    """The repository's content makes the write unsafe (a symlink on the way, a tree too large to read):
    permanent, not retried. `path`: the edited file that could not be read, when that was the reason."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class CommitBack:
    """Writes files to `branch` of the repository at `url` through a private bare repository in `workdir`."""

    def __init__(
        self,
        url: str,
        branch: str,
        *,
        workdir: Path,
        credentials: GitCredentials | None = None,
        author: BotIdentity = BotIdentity(),
        message_template: str = DEFAULT_MESSAGE_TEMPLATE,
        allowed_prefixes: tuple[str, ...] = (DEFAULT_REPORTS_PATH + "/",),
        attempts: int = 4,
        timeout_seconds: float = 60.0,
        backoff_base_seconds: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        allow_local: bool = False,
        ca_file: str | None = None,
        allowed_networks: tuple[Network, ...] | None = None,
    ) -> None:
        if not branch or branch.startswith("-") or ".." in branch:
            raise KgweError(f"invalid commit-back branch {branch!r}")
        self.allow_local = allow_local  # see kgwe.gitops.gitcmd: never from a PolicyRepository
        self.ca_file = ca_file
        # special networks git may reach all the same (the operator's; loopback with local URLs)
        allowed = operator_networks() if allowed_networks is None else allowed_networks
        self.allowed_networks = (*allowed, *(LOOPBACK_NETWORKS if allow_local else ()))
        self.url = check_url(url, allow_local=allow_local)
        self.branch = branch
        self.workdir = Path(workdir)
        self.credentials = credentials
        self.author = author
        self.message_template = message_template
        prefixes = tuple(PurePosixPath(p.strip("/")) for p in allowed_prefixes)
        if not prefixes or any(not p.parts or ".." in p.parts or p.is_absolute() for p in prefixes):
            raise KgweError(
                f"commit-back prefixes {allowed_prefixes!r} must be folders inside the repository"
            )
        self.allowed_prefixes = prefixes
        self.attempts = max(1, attempts)
        self.timeout_seconds = timeout_seconds
        self.backoff_base_seconds = backoff_base_seconds
        self._sleep = sleep
        self._ready = False

    # -- git plumbing -------------------------------------------------------------------------------
    @property
    def git_dir(self) -> Path:
        return self.workdir / "repo.git"

    def _git(
        self,
        *args: str,
        network: bool = False,
        input: bytes | None = None,
        index: Path | None = None,
        stdout: IO[bytes] | None = None,
    ) -> str:
        if not self._ready:
            self.git_dir.mkdir(parents=True, exist_ok=True)
            if not (self.git_dir / "HEAD").exists():
                run_git(["init", "--bare", "--quiet", str(self.git_dir)])
            self._ready = True
        env = {
            "GIT_DIR": str(self.git_dir),
            "GIT_AUTHOR_NAME": self.author.name,
            "GIT_AUTHOR_EMAIL": self.author.email,
            "GIT_COMMITTER_NAME": self.author.name,
            "GIT_COMMITTER_EMAIL": self.author.email,
        }
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        with git_environment(
            self.credentials if network else None,
            connect_timeout_seconds=int(self.timeout_seconds),
            url=self.url if network else None,
            allowed_networks=self.allowed_networks,
        ) as extra:
            env.update(extra)
            return run_git(
                list(args),
                cwd=self.git_dir,
                env=env,
                timeout_seconds=self.timeout_seconds if network else None,
                allow_local=self.allow_local,
                input=input,
                ca_file=self.ca_file,
                stdout=stdout,
            )

    def _fetch(self) -> str:
        remote_ref = f"refs/remotes/origin/{self.branch}"
        url = check_url(self.url, allow_local=self.allow_local)
        refspec = check_argument(f"+refs/heads/{self.branch}:{remote_ref}", "refspec")
        self._git("fetch", "--force", "--no-tags", "--no-write-fetch-head", "--", url, refspec, network=True)
        return self._git("rev-parse", "--verify", "--end-of-options", remote_ref)

    def _check_path(self, path: str) -> str:
        norm = PurePosixPath(path)
        if norm.is_absolute() or ".." in norm.parts or not norm.parts:
            raise KgweError(f"commit-back path {path!r} must be relative and stay inside the repository")
        if any(part.lower() == ".git" or any(c in part for c in "\n\t\0") for part in norm.parts):
            raise KgweError(f"commit-back path {path!r} is not allowed")
        if not any(norm.parts[: len(p.parts)] == p.parts and norm != p for p in self.allowed_prefixes):
            allowed = ", ".join(f"{p}/" for p in self.allowed_prefixes)
            raise KgweError(f"commit-back may only write under {allowed}; refusing {str(norm)!r}")
        return str(norm)

    def _read(self, base: str, rel: str) -> bytes | None:
        """The bytes of file `rel` at commit `base` (None when absent), for an Edit: only a regular file of
        at most MAX_EDITED_BYTES is read (a symlink or a larger file is refused)."""
        listed = self._git("--literal-pathspecs", "ls-tree", "-z", "--full-tree", base, "--", rel)
        entry = next((e for e in listed.split("\0") if e.partition("\t")[2] == rel), None)
        if entry is None:
            return None
        mode, _, sha = entry.partition("\t")[0].split(" ")
        if mode not in ("100644", "100755"):
            raise _Refused(f"{rel} is not a regular file in the repository; refusing to edit it", rel)
        size = int(self._git("cat-file", "-s", sha))
        if size > MAX_EDITED_BYTES:
            bound = f"over the {MAX_EDITED_BYTES}-byte bound of a file to edit"
            raise _Refused(f"{rel} is {size} bytes, {bound}", rel)
        with tempfile.TemporaryFile() as out:
            self._git("cat-file", "blob", sha, stdout=out)
            out.seek(0)
            return out.read(MAX_EDITED_BYTES + 1)

    def _tree_with(self, base: str, files: Mapping[str, Content]) -> str:
        """The tree of `base` with `files` written or removed, built in a private index: no working tree,
        so nothing on disk is ever written through a symlink the repository holds. A repository holding
        more than MAX_COMMIT_BACK_FILES files is refused before its tree is read into the index."""
        try:
            list_tree(self.git_dir, base, limit=MAX_COMMIT_BACK_FILES, sizes=False)
        except GitSourceError as exc:
            raise _Refused(str(exc)) from None
        folders = sorted(
            {"/".join(p.parts[:d]) for p in map(PurePosixPath, files) for d in range(1, len(p.parts))}
        )
        modes = {}
        listed = self._git("ls-tree", "-z", "--full-tree", base, "--", *folders) if folders else ""
        for entry in listed.split("\0"):
            if entry:
                meta, _, name = entry.partition("\t")
                modes[name] = meta.split(" ", 1)[0]
        for rel in files:
            parts = PurePosixPath(rel).parts
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if modes.get(folder, "040000") != "040000":
                    kind = "a symlink" if modes[folder] == "120000" else "not a folder"
                    raise _Refused(f"{folder} is {kind} in the repository; refusing to write {rel} there")
        fd, index_name = tempfile.mkstemp(prefix="kgwe-index-", dir=self.workdir)
        os.close(fd)
        index = Path(index_name)
        try:
            index.unlink()  # git wants to create the index itself
            self._git("read-tree", base, index=index)
            lines = []
            for rel, given in files.items():
                content = given(self._read(base, rel)) if callable(given) else given
                if content is None:
                    lines.append(f"0 {'0' * 40}\t{rel}")  # mode 0: remove the entry
                    continue
                data = content.encode() if isinstance(content, str) else content
                blob = self._git("hash-object", "-w", "--stdin", input=data)
                lines.append(f"100644 {blob}\t{rel}")
            self._git(
                "update-index",
                "-z",
                "--index-info",
                input="".join(f"{ln}\0" for ln in lines).encode(),
                index=index,
            )
            return self._git("write-tree", index=index)
        finally:
            index.unlink(missing_ok=True)

    def _commit_on(self, base: str, files: Mapping[str, Content], message: str) -> str | None:
        """A new commit on top of `base` holding `files`; None when `base` already holds them."""
        tree = self._tree_with(base, files)
        if tree == self._git("rev-parse", "--verify", "--end-of-options", f"{base}^{{tree}}"):
            return None
        return self._git("commit-tree", tree, "-p", base, "-F", "-", input=message.encode())

    # -- the one public operation -----------------------------------------------------------------
    def commit_files(
        self,
        files: Mapping[str, Content],
        *,
        summary: str,
        details: str = "",
        values: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Make `branch` hold `files` (content, None to delete, or an Edit of what the branch holds) in one
        bot commit, pushed without force."""
        if not files:
            raise KgweError("commit-back needs at least one file")
        checked = {self._check_path(p): c for p, c in files.items()}
        result = self._commit_files(checked, summary=summary, details=details, values=values or {})
        COMMIT_BACK_RESULTS.labels(result.status).inc()
        return result

    def _commit_files(
        self,
        files: Mapping[str, Content],
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
        while attempts < self.attempts:
            fetched = False
            try:
                remote_head = self._fetch()
                fetched = True
                # Our content is a function of its inputs: after a concurrent push it is simply written
                # again on top of the new head, an Edit applied to what the new head holds (their commit
                # stays in history; never a force push).
                sha = self._commit_on(remote_head, files, message)
                if sha is None:
                    return CommitResult("unchanged", remote_head, attempts)
                attempts += 1
                url = check_url(self.url, allow_local=self.allow_local)
                target = check_argument(f"{sha}:refs/heads/{self.branch}", "push refspec")
                self._git("push", "--porcelain", "--", url, target, network=True)
                return CommitResult("pushed", sha, attempts)
            except _Refused as exc:
                return CommitResult("rejected", None, max(attempts, 1), str(exc), exc.path)
            except UnsafeGitArgument as exc:  # a target or credentials binding refused: never retried
                return CommitResult("rejected", None, max(attempts, 1), str(exc))
            except git.GitCommandError as exc:
                text = _push_text(exc)
                last_reason = _push_reason(exc)
                lowered = text.lower()
                moved = any(marker in lowered for marker in _MOVED_MARKERS)
                if not moved and any(marker in lowered for marker in _PERMANENT_MARKERS):
                    return CommitResult("rejected", None, max(attempts, 1), last_reason)
                if not fetched:
                    attempts += 1  # a fetch failure also spends an attempt, so a dead remote ends the loop
                delay = next(delays, None)
                if delay is None:
                    break
                self._sleep(delay)
        return CommitResult("failed", None, attempts, last_reason or "gave up after retries")

    def reset(self) -> None:
        """Drop the private repository (e.g. after the remote was replaced)."""
        self._ready = False
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
    return "; ".join(parts) or git_failure(exc)


def _push_text(exc: git.GitCommandError) -> str:
    out = exc.stdout if isinstance(exc.stdout, str) else ""
    err = exc.stderr if isinstance(exc.stderr, str) else ""
    return f"{out}\n{err}"


__all__ = ["DEFAULT_MESSAGE_TEMPLATE", "BotIdentity", "CommitBack", "CommitResult", "Content", "Edit"]
