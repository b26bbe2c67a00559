"""`kgwe demo --keep-repo DIR`: the demo's policy repository, with what the controller committed, left as a
checkout standing alone (the whole demo runs in tests/observability/test_prometheus_e2e.py)."""

from __future__ import annotations

import pytest

from tests.reconcile.conftest import git


def test_demo_keeps_its_policy_repository_where_a_person_can_read_it(tmp_path):
    from kgwe.errors import KgweError
    from kgwe.reconcile.demo_cmd import _keep_repo_target, keep_repository

    full = tmp_path / "full"
    (full / "x").mkdir(parents=True)
    with pytest.raises(KgweError, match="not an empty directory"):
        _keep_repo_target(full)  # refused before the demo starts anything
    target = _keep_repo_target(tmp_path / "kept")
    remote = tmp_path / "gpu-policy.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(remote), str(work))
    (work / "reports" / "prod" / "2026-11").mkdir(parents=True)
    (work / "reports" / "prod" / "2026-11" / "spot.md").write_text("# Spot advice\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "cost reports")
    git(work, "push", "-q", "origin", "HEAD:main")
    keep_repository(remote, target)
    assert (target / "reports" / "prod" / "2026-11" / "spot.md").read_text() == "# Spot advice\n"
    assert git(target, "remote") == "" and git(target, "log", "--format=%s") == "cost reports"
