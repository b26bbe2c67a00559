"""Real local git repositories for the gitops tests: a bare "remote" and a working clone that pushes."""

from __future__ import annotations

import subprocess
from pathlib import Path

ENV = {
    "GIT_AUTHOR_NAME": "Human",
    "GIT_AUTHOR_EMAIL": "human@example.com",
    "GIT_COMMITTER_NAME": "Human",
    "GIT_COMMITTER_EMAIL": "human@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/tmp",
    "PATH": "/usr/bin:/bin",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


class Remote:
    """A bare repository plus a human's clone of it."""

    def __init__(self, root: Path, branch: str = "main") -> None:
        self.bare = root / "remote.git"
        self.work = root / "human"
        self.branch = branch
        git(root, "init", "--bare", "-b", branch, str(self.bare))
        git(root, "clone", str(self.bare), str(self.work))
        git(self.work, "checkout", "-b", branch)

    def commit(self, files: dict[str, str | None], message: str = "change") -> str:
        for rel, content in files.items():
            path = self.work / rel
            if content is None:
                path.unlink()
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
        git(self.work, "add", "--all")
        git(self.work, "commit", "-m", message)
        git(self.work, "push", "origin", f"HEAD:refs/heads/{self.branch}")
        return git(self.work, "rev-parse", "HEAD")

    def pull(self) -> None:
        git(self.work, "pull", "--rebase", "origin", self.branch)

    def show(self, ref: str, path: str) -> str:
        return git(self.bare, "show", f"{ref}:{path}")

    def log(self, ref: str | None = None) -> list[str]:
        return git(self.bare, "log", "--format=%H %an %s", ref or self.branch).splitlines()


import pytest  # noqa: E402


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    r = Remote(tmp_path)
    r.commit({"policy/mig.yaml": "kind: MIGStrategy\n", "README.md": "hello\n"}, "initial")
    return r
