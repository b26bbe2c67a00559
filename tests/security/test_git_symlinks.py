"""Symlinks a committer puts into a policy repository: reported as policy errors naming the file, never
followed, never "reconcile failed: AbsoluteLinkError"."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgwe.gitops.source import GitRef, GitSource, GitSourceError
from kgwe.policy.loader import load_repository

SCORING = """apiVersion: kgwe.nvidia.io/v1
kind: ScoringProfile
metadata: {name: default}
spec: {strategy: BinPack}
"""


def fetch(repo, tmp_path: Path) -> GitSource:
    return GitSource(str(repo.bare), GitRef(branch="main"), cache_dir=tmp_path / "c", allow_local=True)


def test_links_leaving_the_repository_are_policy_errors(policy_repo, tmp_path):
    secret = tmp_path / "secret.yaml"
    secret.write_text("token: hunter2\n")
    policy_repo.push(
        {"policy/scoring.yaml": SCORING},
        links={
            "policy/abs.yaml": str(secret),
            "policy/rel.yaml": "../../../../../../../../" + str(secret),
            "policy/etc": "/etc",
        },
    )
    src = fetch(policy_repo, tmp_path)
    root = src.export(src.fetch().sha, tmp_path / "out", "policy")  # AbsoluteLinkError before
    ps = load_repository(root)
    errors = {d.file: d.message for d in ps.errors}
    assert set(errors) == {"abs.yaml", "rel.yaml", "etc"}, errors
    assert all("symlink leaves the repository" in m for m in errors.values())
    assert ps.scoring_profiles and ps.scoring_profiles[0].name == "default"
    assert "hunter2" not in repr(ps.diagnostics)


def test_a_policy_path_that_is_a_link_is_refused(policy_repo, tmp_path):
    policy_repo.push({"real/scoring.yaml": SCORING}, links={"policy": "/etc"})
    src = fetch(policy_repo, tmp_path)
    with pytest.raises(GitSourceError, match="is a symlink"):
        src.export(src.fetch().sha, tmp_path / "out", "policy")
