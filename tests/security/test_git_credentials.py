"""Credentials the controller holds are never lent out by default, and SSH never trusts a host key on
first use."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from kgwe.gitops.auth import GitCredentials, git_environment
from kgwe.gitops.gitcmd import LOOPBACK_NETWORKS, GitAccess
from kgwe.gitops.source import GitSourceError
from kgwe.policy.cluster_kinds import PolicyRepositorySpec
from kgwe.reconcile.repository import RepositoryReconciler


def ssh_options(env: dict[str, str]) -> list[str]:
    return shlex.split(env["GIT_SSH_COMMAND"])


@pytest.mark.parametrize(
    "creds",
    [
        None,
        GitCredentials(ssh_identity=b"key", hosts=("127.0.0.1",)),
        GitCredentials(ssh_identity=b"key", ssh_known_hosts=b"h k", hosts=("127.0.0.1",)),
    ],
)
def test_ssh_is_always_strict_about_host_keys(creds):
    with git_environment(creds, url="git@127.0.0.1:p.git", allowed_networks=LOOPBACK_NETWORKS) as env:
        opts = ssh_options(env)
    assert "StrictHostKeyChecking=yes" in opts and not any("accept-new" in o for o in opts)
    assert "BatchMode=yes" in opts


def test_the_controllers_environment_token_is_not_lent_by_default(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("KGWE_GIT_TOKEN", "controller-own-token")
    spec = PolicyRepositorySpec.model_validate({"url": "https://git.example.com/p.git"})
    default = RepositoryReconciler(None, "kgwe-system", "r", cache_dir=tmp_path)
    assert default.git.credentials(spec) is None
    allowed = RepositoryReconciler(
        None, "kgwe-system", "r", cache_dir=tmp_path, git_access=GitAccess(credentials_from_env=True)
    )
    assert allowed.git.credentials(spec).password == "controller-own-token"


def test_an_ssh_url_without_a_secret_is_refused(tmp_path: Path):
    spec = PolicyRepositorySpec.model_validate({"url": "ssh://git@git.example.com/p.git"})
    rec = RepositoryReconciler(None, "kgwe-system", "r", cache_dir=tmp_path)
    with pytest.raises(GitSourceError, match=r"needs spec\.secretRef"):
        rec.git.credentials(spec)
