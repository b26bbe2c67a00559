"""GitSource against real local repositories: refs, clean exports, retries, reports-only changes."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from kgwe.errors import KgweError
from kgwe.gitops.source import GitRef, GitSource, GitSourceError, Revision, touches_policy


def make_source(remote, tmp_path: Path, ref: GitRef, **kw) -> GitSource:
    return GitSource(str(remote.bare), ref, cache_dir=tmp_path / "cache", allow_local=True, **kw)


def test_branch_tracks_new_commits_and_exports_clean_tree(remote, tmp_path):
    src = make_source(remote, tmp_path, GitRef(branch="main"))
    rev1 = src.fetch()
    assert rev1.sha == remote.log()[0].split()[0]
    assert str(rev1) == f"main@sha1:{rev1.sha}"
    out1 = src.export(rev1.sha, tmp_path / "r1", "policy")
    assert (out1 / "mig.yaml").read_text() == "kind: MIGStrategy\n"
    assert not (out1 / "README.md").exists()  # only the policy path

    rev2_sha = remote.commit({"policy/mig.yaml": "kind: MIGStrategy # v2\n", "policy/new.yaml": "x: 1\n"})
    rev2 = src.fetch()
    assert rev2.sha == rev2_sha != rev1.sha
    out2 = src.export(rev2.sha, tmp_path / "r2", "policy")
    assert sorted(p.name for p in out2.iterdir()) == ["mig.yaml", "new.yaml"]
    assert src.changed_paths(rev1.sha, rev2.sha) == ["policy/mig.yaml", "policy/new.yaml"]


def test_an_unmoved_ref_is_only_asked_for_and_a_held_commit_not_even_that(remote, tmp_path, monkeypatch):
    """What git runs (a spy over the real git): one ls-remote while the branch stays, a fetch once it moves
    or a push says it did; nothing at all for a pinned commit the mirror holds."""
    import kgwe.gitops.source as source_module

    ran: list[str] = []
    real = source_module.run_git

    def spy(args: list[str], **kw):
        ran.append(args[0])
        return real(args, **kw)

    monkeypatch.setattr(source_module, "run_git", spy)
    src = make_source(remote, tmp_path, GitRef(branch="main"))
    first = src.fetch()
    assert ran == ["fetch"]  # an empty mirror: nothing to compare with
    ran.clear()
    assert src.fetch() == first and ran == ["ls-remote"]
    ran.clear()
    moved = remote.commit({"policy/mig.yaml": "kind: MIGStrategy # moved\n"})
    assert src.fetch().sha == moved and ran == ["ls-remote", "fetch"]
    ran.clear()
    pushed = remote.commit({"policy/mig.yaml": "kind: MIGStrategy # pushed\n"})
    assert src.fetch(moved=True).sha == pushed and ran == ["fetch"]
    ran.clear()
    pinned = make_source(remote, tmp_path, GitRef(commit=first.sha))
    assert pinned.fetch().sha == first.sha and ran == []  # the shared mirror holds it


def test_export_reads_the_commit_not_a_dirty_tree(remote, tmp_path):
    """Even exporting from the human's dirty working clone gives the committed content only."""
    src = GitSource(str(remote.work), GitRef(branch="main"), cache_dir=tmp_path / "cache", allow_local=True)
    (remote.work / "policy" / "mig.yaml").write_text("uncommitted edit\n")
    (remote.work / "policy" / "untracked.yaml").write_text("junk\n")
    rev = src.fetch()
    out = src.export(rev.sha, tmp_path / "x", "policy")
    assert (out / "mig.yaml").read_text() == "kind: MIGStrategy\n"
    assert not (out / "untracked.yaml").exists()


def test_tag_and_commit_refs(remote, tmp_path):
    first = remote.log()[0].split()[0]
    git.Repo(remote.work).git.tag("v1", first)
    git.Repo(remote.work).git.push("origin", "v1")
    remote.commit({"policy/mig.yaml": "moved on\n"})
    tag_rev = make_source(remote, tmp_path, GitRef(tag="v1")).fetch()
    assert tag_rev.sha == first and str(tag_rev).startswith("v1@sha1:")
    commit_rev = make_source(remote, tmp_path, GitRef(commit=first)).fetch()
    assert commit_rev.sha == first and str(commit_rev) == f"sha1:{first}"
    assert Revision.sha_of(str(commit_rev)) == first


def test_unknown_ref_and_bad_refs_are_clear_errors(remote, tmp_path):
    with pytest.raises(GitSourceError, match="branch 'nope' not found"):
        make_source(remote, tmp_path, GitRef(branch="nope")).fetch()
    with pytest.raises(KgweError, match="not a hexadecimal"):
        GitRef(commit="zzz")
    with pytest.raises(KgweError, match="not a valid branch or tag name"):
        GitRef(branch="--upload-pack=evil")
    with pytest.raises(KgweError, match="exactly one"):  # the PolicyRepository model's rule
        GitRef(branch="main", commit="abcdef1")
    src = make_source(remote, tmp_path, GitRef(branch="main"))
    with pytest.raises(GitSourceError, match="does not exist"):
        src.export(src.fetch().sha, tmp_path / "y", "no/such/dir")
    with pytest.raises(KgweError, match="leaves the repository"):
        src.export(src.fetch().sha, tmp_path / "y", "../etc")


def test_unreachable_remote_is_retried_with_backoff_then_fails(tmp_path):
    delays: list[float] = []
    src = GitSource(
        str(tmp_path / "missing.git"),
        GitRef(branch="main"),
        cache_dir=tmp_path / "c",
        attempts=3,
        backoff_base_seconds=0.2,
        sleep=delays.append,
        allow_local=True,
    )
    with pytest.raises(GitSourceError, match="after 3 attempt"):
        src.fetch()
    assert len(delays) == 2
    assert 0.1 <= delays[0] <= 0.2 and 0.2 <= delays[1] <= 0.4


def test_history_rewrite_is_followed(remote, tmp_path):
    src = make_source(remote, tmp_path, GitRef(branch="main"))
    old = src.fetch().sha
    repo = git.Repo(remote.work)
    repo.git.commit("--amend", "-m", "rewritten")
    repo.git.push("--force", "origin", "HEAD:main")
    new = src.fetch().sha
    assert new != old and new == repo.head.commit.hexsha


@pytest.mark.parametrize(
    ("paths", "policy_path", "expected"),
    [
        (["reports/prod/chargeback.md"], "", False),
        (["reports/prod/chargeback.md", "reports/inventory.yaml"], "clusters/prod", False),
        (["reports/a.md", "clusters/prod/mig.yaml"], "clusters/prod", True),
        (["clusters/dev/mig.yaml"], "clusters/prod", False),
        (["clusters/prod/mig.yaml"], "clusters/prod/", True),
        (["README.md"], "", True),
        ([], "", False),
    ],
)
def test_reports_only_commits_do_not_trigger(paths, policy_path, expected):
    assert touches_policy(paths, policy_path) is expected
