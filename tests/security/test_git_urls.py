"""Git URLs and refs a PolicyRepository (or a committer) controls must never become git options, local
reads or other transports: `--upload-pack=<cmd>`, local paths, file://, ext::."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import git
import pytest

from kgwe.errors import KgweError
from kgwe.gitops.commit_back import CommitBack
from kgwe.gitops.gitcmd import UnsafeGitArgument, run_git
from kgwe.gitops.source import GitRef, GitSource

ATTACKS = [
    "--upload-pack=touch {pwned} #://x",
    "-u touch {pwned} https://x",
    "ext::sh -c touch% {pwned}",
    "file:///etc",
    "/var/cache/kgwe/other-repository.git",
    "ssh://-oProxyCommand=touch%20{pwned}/x",
    "git@-oProxyCommand=x:y",
    "https://user:token@git.example.com/x.git",
]


def manifest(url: str) -> str:
    return f"""apiVersion: kgwe.nvidia.io/v1
kind: PolicyRepository
metadata:
  name: gpu-policy
  namespace: kgwe-system
spec:
  url: "{url}"
  ref: {{branch: main}}
"""


@pytest.mark.parametrize("attack", ATTACKS)
def test_kgwe_validate_refuses_the_url_with_file_and_line(tmp_path: Path, attack: str) -> None:
    url = attack.format(pwned=tmp_path / "pwned")
    (tmp_path / "repo.yaml").write_text(manifest(url))
    done = subprocess.run(
        [sys.executable, "-m", "kgwe.cli", "validate", str(tmp_path / "repo.yaml")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "repo.yaml:7:3: error: PolicyRepository/gpu-policy spec.url:" in done.stdout, done.stdout
    assert "not an allowed Git URL" in done.stdout


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("allow_local", [False, True])
def test_git_is_never_run_with_the_url(tmp_path: Path, attack: str, allow_local: bool) -> None:
    url = attack.format(pwned=tmp_path / "pwned")
    if allow_local and attack in ("file:///etc", "/var/cache/kgwe/other-repository.git"):
        return  # what the operator's allowance is for (tests, demo); never settable from a PolicyRepository
    with pytest.raises(UnsafeGitArgument):
        GitSource(url, GitRef(branch="main"), cache_dir=tmp_path / "c", allow_local=allow_local).fetch()
    with pytest.raises(UnsafeGitArgument):
        CommitBack(url, "main", workdir=tmp_path / "cb", allow_local=allow_local)
    assert not (tmp_path / "pwned").exists()


def test_the_url_is_checked_again_right_before_git_runs(tmp_path: Path) -> None:
    """Even a GitSource whose URL was changed after construction never hands an option to git."""
    src = GitSource("https://git.example.com/p.git", GitRef(branch="main"), cache_dir=tmp_path / "c")
    src.url = f"--upload-pack=touch {tmp_path / 'pwned'} #://x"
    with pytest.raises(UnsafeGitArgument):
        src.fetch()
    assert not (tmp_path / "pwned").exists()


def test_the_git_process_itself_refuses_file_and_ext_transports(tmp_path: Path) -> None:
    local = tmp_path / "r.git"
    run_git(["init", "-q", "--bare", str(local)])
    for url in (f"file://{local}", str(local), f"ext::sh -c touch% {tmp_path / 'pwned'}"):
        with pytest.raises(git.GitCommandError) as err:
            run_git(["ls-remote", "--", url], cwd=tmp_path, timeout_seconds=30)
        assert "not allowed" in str(err.value.stderr) or "unsupported" in str(err.value.stderr)
    run_git(["ls-remote", "--", str(local)], cwd=tmp_path, timeout_seconds=30, allow_local=True)
    with pytest.raises(git.GitCommandError):  # ext:: stays off even with the local allowance
        run_git(
            ["ls-remote", "--", f"ext::sh -c touch% {tmp_path / 'pwned'}"], cwd=tmp_path, allow_local=True
        )
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    "ref", [{"branch": "--upload-pack=x"}, {"tag": "-x"}, {"branch": "a..b"}, {"branch": "main", "tag": "v1"}]
)
def test_refs_that_git_would_misread_are_refused(ref: dict) -> None:
    with pytest.raises(KgweError):
        GitRef(**ref)
