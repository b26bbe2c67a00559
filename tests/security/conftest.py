"""A real bare repository plus a committer's clone, for the attack tests on Git handling."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

COMMITTER = {
    "GIT_AUTHOR_NAME": "Mallory",
    "GIT_AUTHOR_EMAIL": "mallory@example.com",
    "GIT_COMMITTER_NAME": "Mallory",
    "GIT_COMMITTER_EMAIL": "mallory@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/tmp",
    "PATH": "/usr/bin:/bin",
}


def sh_git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=COMMITTER, check=True, capture_output=True, text=True)
    return done.stdout.strip()


class Repo:
    """`bare` is what KGWE fetches from; `push` commits files and symlinks (name -> target) to it."""

    def __init__(self, root: Path) -> None:
        self.bare, self.work = root / "policy.git", root / "committer"
        sh_git(root, "init", "-q", "--bare", "-b", "main", str(self.bare))
        sh_git(root, "init", "-q", "-b", "main", str(self.work))
        sh_git(self.work, "remote", "add", "origin", str(self.bare))

    def push(self, files: dict[str, str], links: dict[str, str] | None = None) -> str:
        for rel, text in files.items():
            (self.work / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.work / rel).write_text(text)
        for rel, target in (links or {}).items():
            (self.work / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, self.work / rel)
        sh_git(self.work, "add", "-A")
        sh_git(self.work, "commit", "-qm", "change")
        sh_git(self.work, "push", "-q", "origin", "HEAD:main")
        return sh_git(self.work, "rev-parse", "HEAD")

    def show(self, path: str) -> str:
        return sh_git(self.bare, "show", f"main:{path}")

    def mode(self, path: str) -> str:
        return sh_git(self.bare, "ls-tree", "main", "--", path).split()[0]


@pytest.fixture
def policy_repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path)


def sample_files(prefix: str) -> dict[str, str]:
    """sample-repo's files, named as they would be under `prefix` in a repository (for Repo.push)."""
    from kgwe.resources import sample_repo_dir

    root = sample_repo_dir()
    return {f"{prefix}/{p.relative_to(root)}": p.read_text() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="session")
def policy_crds(k8s_api):
    """The CRDs from deploy/crds on the real API server, and the controller's namespace."""
    from kgwe.cluster.client import ensure_namespace
    from tests.harness.crds import install_crds

    install_crds(k8s_api)
    ensure_namespace(k8s_api, "kgwe-system")


ONE_NODE_INVENTORY = """\
apiVersion: kgwe.nvidia.io/v1
kind: GPUInventory
metadata: {name: attacks}
spec:
  nodes:
    - {name: h1, gpus: 8, product: NVIDIA-H100-80GB-HBM3, topology: DGX-H100}
"""


@pytest.fixture(scope="module")
def inventory_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A static GPUInventory of one 8-GPU node, for `kgwe extender --inventory`."""
    path = tmp_path_factory.mktemp("inventory") / "inventory.yaml"
    path.write_text(ONE_NODE_INVENTORY)
    return path
