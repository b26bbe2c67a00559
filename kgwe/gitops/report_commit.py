"""Cost reports into the policy repository: the files `kgwe.cost.reports.build_reports` renders, committed
by the commit-back rules (never a force-push, never an empty commit)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kgwe.gitops.auth import GitCredentials
from kgwe.gitops.commit_back import CommitBack, CommitResult


def commit_reports(
    files: Mapping[str, str],
    repo_url: str,
    branch: str,
    workdir: Path,
    summary: str,
    credentials: GitCredentials | None = None,
    allow_local: bool = False,
) -> CommitResult:
    """Commit the report files to `branch` of `repo_url`; `credentials` are the repository's
    GitCredentials (token or SSH key) when it is not local; `allow_local` lets the person running
    `kgwe report` name a local repository."""
    cb = CommitBack(repo_url, branch, workdir=workdir, credentials=credentials, allow_local=allow_local)
    return cb.commit_files(dict(files), summary=summary)
