"""Commit-back through symlinks: a committer who plants `reports/x.yaml -> /some/file` (or makes `reports`
itself a link) must not make the controller write outside its own private Git data."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgwe.errors import KgweError
from kgwe.gitops.commit_back import CommitBack


def commit_back(repo, tmp_path: Path, prefix: str = "reports") -> CommitBack:
    return CommitBack(
        str(repo.bare), "main", workdir=tmp_path / "cb", allowed_prefixes=(prefix,), allow_local=True
    )


def test_a_symlinked_report_file_is_replaced_in_git_not_written_through(policy_repo, tmp_path):
    victim = tmp_path / "kgwe-cost.db"
    victim.write_text("precious\n")
    policy_repo.push({"policy/a.yaml": "x: 1\n"}, links={"reports/x.yaml": str(victim)})
    result = commit_back(policy_repo, tmp_path).commit_files({"reports/x.yaml": "report\n"}, summary="r")
    assert result.status == "pushed", result.reason
    assert victim.read_text() == "precious\n"
    assert policy_repo.show("reports/x.yaml") == "report" and policy_repo.mode("reports/x.yaml") == "100644"


def test_a_symlinked_report_folder_is_refused(policy_repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    policy_repo.push({"policy/a.yaml": "x: 1\n"}, links={"reports": str(outside)})
    before = policy_repo.show("reports")
    result = commit_back(policy_repo, tmp_path).commit_files({"reports/x.yaml": "report\n"}, summary="r")
    assert result.status == "rejected" and "reports is a symlink" in result.reason
    assert list(outside.iterdir()) == []
    assert policy_repo.show("reports") == before


def test_only_the_configured_prefix_may_be_written(policy_repo, tmp_path):
    policy_repo.push({"policy/a.yaml": "x: 1\n"})
    cb = commit_back(policy_repo, tmp_path, prefix="reports/prod")
    for bad in ("reports/other/x.yaml", "policy/a.yaml", "reports/prod", "reports/prod/.git/config"):
        with pytest.raises(KgweError):
            cb.commit_files({bad: "x"}, summary="bad")
    assert cb.commit_files({"reports/prod/x.yaml": "ok\n"}, summary="ok").status == "pushed"


def test_reports_may_not_lie_inside_the_policy_path():
    from pydantic import ValidationError

    from kgwe.policy.cluster_kinds import PolicyRepositorySpec

    base = {"url": "https://git.example.com/p.git"}
    for path, reports in (("policy", "policy/reports"), (".", "reports"), ("policy", "policy")):
        with pytest.raises(ValidationError, match="lies inside the policy path"):
            PolicyRepositorySpec.model_validate({**base, "path": path, "reports": {"path": reports}})
    ok = PolicyRepositorySpec.model_validate(
        {**base, "path": "clusters/prod", "reports": {"path": "reports"}}
    )
    assert ok.reports_path == "reports" and ok.policy_path == "clusters/prod"
