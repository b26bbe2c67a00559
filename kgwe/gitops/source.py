"""The policy repository as a Git source: fetch into a private bare mirror, resolve the tracked ref to a
commit, and export that commit's tree into a fresh directory.

Why a bare mirror plus an export of the commit's blobs: there is no working tree to get dirty, so what the
controller reads is exactly what the commit holds (no leftovers from an earlier revision, no local edits, no
untracked files). The export writes each blob's committed bytes itself (`git cat-file --batch`), never
through `git archive` or a checkout, which honour the commit's own `.gitattributes`: `export-subst` would
expand placeholders (a small tree exported as many times its size), `ident` and end-of-line or encoding
conversions grow files too, and `export-ignore` would hide committed files from KGWE while the Git host
still shows them. Its byte budget is counted as it writes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import git

from kgwe.errors import KgweError
from kgwe.gitops.auth import GitCredentials, git_environment
from kgwe.gitops.gitcmd import (
    LOOPBACK_NETWORKS,
    Network,
    check_argument,
    check_url,
    display_url,
    git_failure,
    git_process_environment,
    operator_networks,
    run_git,
)
from kgwe.gitops.refs import advertised_ref
from kgwe.gitops.retry import with_retries
from kgwe.policy.cluster_kinds import DEFAULT_BRANCH
from kgwe.policy.cluster_kinds import GitRef as ModelGitRef
from kgwe.policy.types import GIT_COMMIT_PATTERN, parse_git_ref_name
from kgwe.vocab import DEFAULT_REPORTS_PATH

MAX_EXPORT_FILES = 20_000  # files (and symlinks) one export may write; the loader reads at most 5,000 YAML
MAX_EXPORT_BYTES = 64 * 1024 * 1024  # their size once expanded (a push compresses well: zeros, repeats)


log = logging.getLogger(__name__)


MAX_AUTHOR_FIELD_CHARS = 200  # of a commit's author name or e-mail, read for the audit trail


class GitSourceError(KgweError):
    """Fetching or reading the policy repository failed (after the bounded retries)."""


REGULAR_MODES = {"100644": 0o644, "100755": 0o755}  # a blob's mode in a tree -> the exported file's
SYMLINK_MODE = "120000"
SUBMODULE_MODE = "160000"  # a commit of another repository: exported as an empty folder, as git does
MAX_SYMLINK_TARGET_BYTES = 4095  # PATH_MAX less its NUL


@dataclass(frozen=True)
class TreeEntry:
    path: str  # as text (undecodable bytes replaced): for messages and matching
    size_bytes: int  # 0 for a submodule (it is not exported)
    mode: str = ""
    oid: str = ""
    raw_path: bytes = b""  # the name's bytes as the tree holds them: what an export writes


def list_tree(
    repo: git.Repo | Path, sha: str, paths: tuple[str, ...] = (), *, limit: int, sizes: bool = True
) -> list[TreeEntry]:
    """The files of commit `sha` (under `paths`; with their sizes unless `sizes` is False), read as a stream
    from `git ls-tree` in `repo` (or that git directory) and stopped at `limit` entries: GitSourceError past
    it, before a hostile tree costs memory or time."""
    check_argument(sha, "commit")
    long = ["-l"] if sizes else []
    # the paths follow --end-of-options: a "--" there would be taken for a path
    command = ["git", "ls-tree", "-r", *long, "-z", "--end-of-options", sha, *paths]
    entries: list[TreeEntry] = []
    with subprocess.Popen(
        command,
        cwd=repo if isinstance(repo, Path) else repo.git_dir,
        env=git_process_environment({}, allow_local=False),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as process:
        assert process.stdout is not None
        pending = b""
        while len(entries) <= limit:
            chunk = process.stdout.read(65536)
            if not chunk:
                break
            *records, pending = (pending + chunk).split(b"\0")
            for record in records:
                meta, _, name = record.partition(b"\t")
                fields = meta.split()  # mode, type, object id and, with sizes, the size
                size = fields[-1] if sizes else b"-"
                entries.append(
                    TreeEntry(
                        name.decode("utf-8", "replace"),
                        int(size) if size.isdigit() else 0,
                        mode=fields[0].decode("ascii", "replace") if fields else "",
                        oid=fields[2].decode("ascii", "replace") if len(fields) > 2 else "",
                        raw_path=name,
                    )
                )
        if len(entries) > limit:
            process.kill()
            raise GitSourceError(f"commit {sha[:12]} holds more than {limit} files; refused")
        process.wait()
    if process.returncode != 0:
        raise GitSourceError(f"cannot list the files of commit {sha[:12]}")
    return entries


def check_tree_size(repo: git.Repo, sha: str, paths: tuple[str, ...] = ()) -> list[TreeEntry]:
    """The tree's entries (under `paths`); GitSourceError when they are more than MAX_EXPORT_FILES or their
    blobs hold more than MAX_EXPORT_BYTES."""
    entries = list_tree(repo, sha, paths, limit=MAX_EXPORT_FILES)
    total = sum(e.size_bytes for e in entries)
    if total > MAX_EXPORT_BYTES:
        raise _too_large(sha, f"{total} bytes")
    return entries


def _too_large(sha: str, found: str) -> GitSourceError:
    return GitSourceError(
        f"commit {sha[:12]} expands to more than {MAX_EXPORT_BYTES} bytes; refused ({found})"
    )


@dataclass(frozen=True)
class GitRef:
    """What to track: exactly one of branch, tag or commit, the PolicyRepository model's rule (the model
    validates the spec; this re-checks values that reach git from elsewhere)."""

    branch: str | None = None
    tag: str | None = None
    commit: str | None = None

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.branch, self.tag, self.commit)) != 1:
            raise KgweError("set exactly one of ref.branch, ref.tag, ref.commit")
        try:
            if self.commit is not None and not re.fullmatch(GIT_COMMIT_PATTERN, self.commit):
                raise ValueError(f"ref.commit {self.commit!r} is not a hexadecimal commit id")
            for value in (self.branch, self.tag):
                if value is not None:
                    parse_git_ref_name(value)
        except ValueError as exc:
            raise KgweError(str(exc)) from None

    @classmethod
    def from_model(cls, ref: ModelGitRef | None) -> GitRef:
        """From the validated PolicyRepository spec.ref (None: the default branch)."""
        if ref is None:
            return cls(branch=DEFAULT_BRANCH)
        return cls(branch=ref.branch, tag=ref.tag, commit=ref.commit)

    @property
    def name(self) -> str:
        """The human name used in revisions: branch or tag name, "" for a bare commit."""
        return self.tag or self.branch or ""


@dataclass(frozen=True)
class Revision:
    """One resolved revision, printed Flux-style: `main@sha1:<40 hex>`."""

    ref_name: str
    sha: str

    def __str__(self) -> str:
        return f"{self.ref_name}@sha1:{self.sha}" if self.ref_name else f"sha1:{self.sha}"

    @staticmethod
    def sha_of(text: str) -> str:
        """The commit id inside a printed revision (or the text itself when it already is one)."""
        return text.rsplit("sha1:", 1)[-1]


def export_commit(repo: git.Repo, sha: str, dest: Path, subpath: str | None = None) -> Path:
    """Write the tree of commit `sha` (optionally only `subpath`) into the empty folder `dest`, each file
    with the bytes the commit holds (no attribute of any kind applied); returns the policy folder."""
    dest.mkdir(parents=True, exist_ok=True)
    sub = (subpath or "").strip("/")
    if sub and (sub.startswith(("..", "-")) or "/../" in f"/{sub}/"):
        raise KgweError(f"path {subpath!r} leaves the repository")
    check_argument(sha, "commit")
    if sub:
        try:
            repo.git.cat_file("-e", "--end-of-options", f"{sha}:{sub}")
        except git.GitCommandError as exc:
            raise GitSourceError(f"path {sub!r} does not exist at commit {sha[:12]}") from exc
    entries = check_tree_size(repo, sha, (sub,) if sub else ())
    _write_tree(Path(repo.git_dir), sha, entries, dest)
    root = dest / sub if sub else dest
    if sub and (root.is_symlink() or not root.resolve().is_relative_to(dest.resolve())):
        raise GitSourceError(f"path {sub!r} is a symlink at commit {sha[:12]}; name a folder instead")
    return root


def _write_tree(git_dir: Path, sha: str, entries: list[TreeEntry], dest: Path) -> None:
    """Write `entries` of commit `sha` under `dest`: files first, symlinks last (so nothing is ever written
    through a link), every name checked to stay inside `dest`, every file created anew, and the bytes
    counted as they are written (GitSourceError past MAX_EXPORT_BYTES, whatever the listing said)."""
    targets = {e.raw_path: _export_path(dest, sha, e) for e in entries}
    for entry in entries:
        if entry.mode == SUBMODULE_MODE:
            targets[entry.raw_path].mkdir(parents=True, exist_ok=True)
        elif entry.mode not in REGULAR_MODES and entry.mode != SYMLINK_MODE:
            raise GitSourceError(f"{entry.path} has mode {entry.mode} at commit {sha[:12]}; refused")
    blobs = [e for e in entries if e.mode in REGULAR_MODES or e.mode == SYMLINK_MODE]
    links: list[tuple[Path, bytes]] = []
    with tempfile.TemporaryFile() as wanted:
        wanted.write(b"".join(e.oid.encode() + b"\n" for e in blobs))
        wanted.seek(0)
        with subprocess.Popen(
            ["git", "cat-file", "--batch"],
            cwd=git_dir,
            env=git_process_environment({}, allow_local=False),
            stdin=wanted,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        ) as process:
            assert process.stdout is not None
            try:
                written = 0
                for entry in blobs:
                    size = _blob_header(process.stdout, entry, sha)
                    written += size
                    if written > MAX_EXPORT_BYTES:
                        raise _too_large(sha, f"{written} bytes by {entry.path}")
                    if entry.mode == SYMLINK_MODE:
                        links.append(
                            (targets[entry.raw_path], _symlink_target(process.stdout, size, entry, sha))
                        )
                    else:
                        _write_file(
                            process.stdout, size, targets[entry.raw_path], REGULAR_MODES[entry.mode], sha
                        )
                    if process.stdout.read(1) != b"\n":
                        raise GitSourceError(f"cannot read {entry.path} at commit {sha[:12]}")
            finally:
                process.kill()
    for path, target in links:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.fsdecode(target), path)
        except OSError as exc:
            raise GitSourceError(f"cannot export {path.relative_to(dest)}: {exc.strerror}") from None


def _export_path(dest: Path, sha: str, entry: TreeEntry) -> Path:
    """Where an entry is written: its name's parts, none empty, "." or ".." (git itself never writes such a
    tree, a hostile server may send one)."""
    parts = entry.raw_path.split(b"/")
    if any(part in (b"", b".", b"..") or b"\0" in part for part in parts):
        raise GitSourceError(f"commit {sha[:12]} holds a path that leaves its tree ({entry.path!r}); refused")
    return dest.joinpath(*map(os.fsdecode, parts))


def _blob_header(out: IO[bytes], entry: TreeEntry, sha: str) -> int:
    """The size `git cat-file --batch` announces for the blob of `entry`."""
    fields = out.readline(256).split()
    if len(fields) != 3 or fields[1] != b"blob" or not fields[2].isdigit():
        raise GitSourceError(f"cannot read {entry.path} at commit {sha[:12]}")
    return int(fields[2])


def _symlink_target(out: IO[bytes], size: int, entry: TreeEntry, sha: str) -> bytes:
    target = out.read(min(size, MAX_SYMLINK_TARGET_BYTES + 1))
    if size > MAX_SYMLINK_TARGET_BYTES or len(target) != size or not target or b"\0" in target:
        raise GitSourceError(
            f"{entry.path} at commit {sha[:12]} is a symlink git could not check out; refused"
        )
    return target


def _write_file(out: IO[bytes], size: int, path: Path, mode: int, sha: str) -> None:
    """`size` bytes of `out` into the new file `path` (never an existing file, never through a link)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        raise GitSourceError(f"cannot export {path.name} of commit {sha[:12]}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as file:
        left = size
        while left:
            chunk = out.read(min(left, 1 << 16))
            if not chunk:
                raise GitSourceError(f"cannot read {path.name} at commit {sha[:12]}")
            file.write(chunk)
            left -= len(chunk)


def resolve_local(repo: git.Repo, refname: str) -> str:
    """A ref name, tag or commit id in a local repository → full commit id (KgweError if unknown)."""
    try:
        return str(repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{refname}^{{commit}}"))
    except git.GitCommandError as exc:
        raise KgweError(f"unknown git revision {refname!r}") from exc


def changed_paths(repo: git.Repo, old_sha: str | None, new_sha: str) -> list[str]:
    """Paths that differ between two commits (every path of `new_sha` when there is no old one)."""
    if old_sha is None:
        out = repo.git.ls_tree("-r", "--name-only", "--end-of-options", new_sha)
    else:
        out = repo.git.diff("--name-only", "--no-renames", "--end-of-options", old_sha, new_sha)
    return [line for line in out.splitlines() if line]


def touches_policy(
    paths: list[str], policy_path: str = "", ignored_prefixes: tuple[str, ...] = (DEFAULT_REPORTS_PATH + "/",)
) -> bool:
    """Whether a change matters to the reconciler: it touches the policy folder outside ignored folders.

    Commits that only touch `reports/` (what KGWE commits back itself) must not trigger a reconcile, so
    the controller never feeds on its own commits.
    """
    root = policy_path.strip("/")
    prefixes = tuple(p.strip("/") + "/" for p in ignored_prefixes if p.strip("/"))
    for path in paths:
        if prefixes and path.startswith(prefixes):
            continue
        if not root or path == root or path.startswith(root + "/"):
            return True
    return False


class GitSource:
    """A remote policy repository tracked at one ref, mirrored under `cache_dir`."""

    def __init__(
        self,
        url: str,
        ref: GitRef,
        *,
        cache_dir: Path,
        credentials: GitCredentials | None = None,
        timeout_seconds: float = 60.0,
        attempts: int = 3,
        backoff_base_seconds: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        allow_local: bool = False,
        ca_file: str | None = None,
        allowed_networks: tuple[Network, ...] | None = None,
    ) -> None:
        self.allow_local = allow_local  # see kgwe.gitops.gitcmd: never from a PolicyRepository
        self.ca_file = ca_file
        # special networks git may reach all the same (the operator's; loopback with local URLs)
        allowed = operator_networks() if allowed_networks is None else allowed_networks
        self.allowed_networks = (*allowed, *(LOOPBACK_NETWORKS if allow_local else ()))
        self.url = check_url(url, allow_local=allow_local)
        self.ref = ref
        self.credentials = credentials
        self.timeout_seconds = timeout_seconds
        self.attempts = max(1, attempts)
        self.backoff_base_seconds = backoff_base_seconds
        self._sleep = sleep
        digest = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        self.mirror_path = Path(cache_dir) / f"{digest}.git"
        self._repo: git.Repo | None = None
        self._resolved: tuple[str, str] | None = None  # (the ref's object, the commit it resolved to)

    @property
    def repo(self) -> git.Repo:
        if self._repo is None:
            if (self.mirror_path / "HEAD").exists():
                self._repo = git.Repo(self.mirror_path)
            else:
                self.mirror_path.parent.mkdir(parents=True, exist_ok=True)
                self._repo = git.Repo.init(self.mirror_path, bare=True)
        return self._repo

    def _network_environment(self, url: str) -> AbstractContextManager[dict[str, str]]:
        """The environment of every git call that reaches the remote (fetch and ls-remote alike): the
        target checked and pinned, the credentials only for the host they are bound to, no redirect
        followed (kgwe.gitops.auth.git_environment; UnsafeGitArgument when refused)."""
        return git_environment(
            self.credentials,
            connect_timeout_seconds=int(self.timeout_seconds),
            url=url,
            allowed_networks=self.allowed_networks,
        )

    def _fetch_once(self) -> None:
        url = check_url(self.url, allow_local=self.allow_local)  # again, right before git sees it
        refspecs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
        args = ["fetch", "--prune", "--prune-tags", "--force", "--no-write-fetch-head", "--", url, *refspecs]
        self.repo  # noqa: B018 - creates the mirror on first use
        with self._network_environment(url) as env:
            run_git(
                args,
                cwd=self.mirror_path,
                env=env,
                timeout_seconds=self.timeout_seconds,
                allow_local=self.allow_local,
                ca_file=self.ca_file,
            )

    def fetch(self, *, moved: bool = False) -> Revision:
        """Fetch (bounded retries with backoff) and resolve the tracked ref to a commit. Nothing is fetched
        when the mirror already has what the ref names: the pinned commit, or the branch or tag where the
        remote has it now (one request for the remote's refs, kgwe.gitops.refs, else one `git ls-remote`: a
        poll of an unchanged repository transfers nothing).
        `moved`: the caller knows the ref moved (a push said so), so the remote is not asked first."""
        if not moved and self._up_to_date():
            return Revision(self.ref.name, self._resolve())
        try:
            with_retries(
                self._fetch_once,
                attempts=self.attempts,
                retry_on=lambda exc: isinstance(exc, git.GitCommandError),
                base_seconds=self.backoff_base_seconds,
                sleep=self._sleep,
                rng=random.Random(),
            )
        except git.GitCommandError as exc:
            # git's own words go to the operator's log only (see kgwe.gitops.gitcmd.git_failure)
            log.warning(
                "fetching %s failed: %s", self.display_url, _last_line(exc)
            )  # the operator's eyes only
            raise GitSourceError(
                f"fetching {self.display_url} failed after {self.attempts} attempt(s): {git_failure(exc)}"
            ) from None
        return Revision(self.ref.name, self._resolve())

    def _up_to_date(self) -> bool:
        """Whether the mirror has the tracked commit, or the tracked branch or tag where the remote has it
        (asked once, without retries: any doubt is settled by the fetch). A refused target or unbound
        credentials raise, as they would for the fetch."""
        if not (self.mirror_path / "HEAD").exists():
            return False
        name = f"refs/tags/{self.ref.tag}" if self.ref.tag else f"refs/heads/{self.ref.branch}"
        try:
            if self.ref.commit:
                self.repo.git.cat_file("-e", "--end-of-options", f"{self.ref.commit}^{{commit}}")
                return True
            local = self._held(name)
            if local is None:
                return False
            url = check_url(self.url, allow_local=self.allow_local)  # again, right before any request
            advertised = advertised_ref(
                url,
                name,
                credentials=self.credentials,
                ca_file=self.ca_file,
                allowed_networks=self.allowed_networks,
                timeout_seconds=self.timeout_seconds,
            )
            if advertised is not None:  # asked in-process (kgwe.gitops.refs); None: only git may say
                return advertised == local
            with self._network_environment(url) as env:
                listed = run_git(
                    ["ls-remote", "--", url, name],
                    cwd=self.mirror_path,
                    env=env,
                    timeout_seconds=self.timeout_seconds,
                    allow_local=self.allow_local,
                    ca_file=self.ca_file,
                )
        except git.GitCommandError:
            return False
        remote = [line.partition("\t") for line in listed.splitlines()]
        return any(ref == name and sha == local for sha, _, ref in remote)

    def _resolve(self) -> str:
        if self.ref.commit:
            candidate = self.ref.commit
            where = f"commit {candidate}"
        elif self.ref.tag:
            candidate, where = f"refs/tags/{self.ref.tag}", f"tag {self.ref.tag!r}"
        else:
            candidate, where = f"refs/heads/{self.ref.branch}", f"branch {self.ref.branch!r}"
        held = None if self.ref.commit else self._held(candidate)
        if held is not None and self._resolved is not None and self._resolved[0] == held:
            return self._resolved[1]  # the same ref value names the same commit (objects never change)
        try:
            commit = str(
                self.repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{candidate}^{{commit}}")
            )
        except git.GitCommandError as exc:
            raise GitSourceError(f"{where} not found in {self.display_url}") from exc
        self._resolved = (held, commit) if held is not None else None
        return commit

    def _held(self, name: str) -> str | None:
        """The object the mirror's ref `name` holds, read from its ref files without a git process (None:
        no such ref)."""
        try:
            return git.SymbolicReference.dereference_recursive(self.repo, name)
        except ValueError:
            return None

    @property
    def display_url(self) -> str:
        """The URL without any user-info, safe for status and logs."""
        return display_url(self.url)

    def export(self, sha: str, dest: Path, subpath: str | None = None) -> Path:
        """A clean copy of commit `sha` (or its `subpath`) in `dest`."""
        return export_commit(self.repo, sha, dest, subpath)

    def last_change(self, sha: str, path: str = "", excluded: str = "") -> tuple[str, str, str]:
        """(commit id, author name, author e-mail) of the newest commit up to `sha` that changed `path`
        (the whole tree when empty) outside `excluded`; `sha` itself when none did. The author's name and
        e-mail are what its committer typed: git cuts each to MAX_AUTHOR_FIELD_CHARS before Python reads
        them, and they are only ever shown (kgwe.audit.stamp cleans them)."""
        field = f"%<({MAX_AUTHOR_FIELD_CHARS},trunc)"
        pathspecs = [f":(top,literal){path.strip('/')}" if path.strip("/") else ":(top)"]
        if excluded.strip("/"):
            pathspecs.append(f":(top,literal,exclude){excluded.strip('/')}")
        form = f"--format=%H%x00{field}%an%x00{field}%ae"
        out = self.repo.git.log("-1", form, "--end-of-options", sha, "--", *pathspecs)
        if not out:
            out = self.repo.git.log("-1", form, "--end-of-options", sha)
        commit, name, email = [*out.split("\0"), "", ""][:3]
        return commit.strip(), name.strip(), email.strip()

    def changed_paths(self, old_sha: str | None, new_sha: str) -> list[str]:
        if old_sha is not None:
            try:
                self.repo.git.cat_file("-e", "--end-of-options", f"{old_sha}^{{commit}}")
            except git.GitCommandError:
                old_sha = None  # history rewritten or unknown: treat everything as changed
        return changed_paths(self.repo, old_sha, new_sha)


def _last_line(exc: git.GitCommandError) -> str:
    """The last meaningful stderr line of a failed git command (no command line: it may hold secrets)."""
    stderr = exc.stderr if isinstance(exc.stderr, str) else str(exc.stderr or "")
    lines = [ln.strip().removeprefix("stderr: ").strip("'") for ln in stderr.splitlines() if ln.strip()]
    lines = [ln for ln in lines if ln]
    if lines:
        return lines[-1]
    return f"git exited with status {exc.status}" if exc.status is not None else "git timed out"


__all__ = [
    "GitRef",
    "GitSource",
    "GitSourceError",
    "Revision",
    "TreeEntry",
    "changed_paths",
    "check_tree_size",
    "export_commit",
    "list_tree",
    "resolve_local",
    "touches_policy",
]
