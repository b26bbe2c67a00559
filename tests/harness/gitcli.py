"""The git command line for tests that write a policy repository by hand (init, commit, push), with a fixed
author and no user configuration, so a host's ~/.gitconfig cannot change what a test commits."""

from __future__ import annotations

import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@x",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x",
}


def git(cwd: Path, *args: str) -> str:
    """Run `git ARGS` in `cwd`; its stdout, stripped (a failure raises CalledProcessError)."""
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**GIT_ENV, "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
