"""A commit's own `.gitattributes` changes nothing KGWE reads: exports hold the committed bytes of every
committed file. `export-subst` used to expand `$Format:...$` placeholders at export time (a 100 KB tree
exported as 80 MB, past the 64 MiB bound checked on the blobs' sizes), `ident` and end-of-line conversions
grew files the same way, and `export-ignore` hid committed files from KGWE while the Git host still showed
them. Both entry points are attacked: the controller's GitSource and `kgwe plan` in CI."""

from __future__ import annotations

from pathlib import Path

import git as gitpython
import pytest

from kgwe.cli import main
from kgwe.errors import KgweError
from kgwe.gitops.source import MAX_EXPORT_BYTES, GitRef, GitSource, export_commit
from tests.security.conftest import Repo, sample_files, sh_git

PLACEHOLDER = "$Format:%>(16000)%H$"  # 20 bytes that export-subst pads to 16,000
SUBST_FILES = {f"policy/notes/subst{i}.txt": PLACEHOLDER * 1000 for i in range(6)}  # 120 KB: 96 MB


def exported_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture
def source(policy_repo: Repo, tmp_path: Path) -> GitSource:
    return GitSource(str(policy_repo.bare), GitRef(branch="main"), cache_dir=tmp_path / "c", allow_local=True)


def test_export_subst_placeholders_are_not_expanded(policy_repo: Repo, source: GitSource, tmp_path: Path):
    sha = policy_repo.push({".gitattributes": "* export-subst\n", **SUBST_FILES})
    assert source.fetch().sha == sha
    root = source.export(sha, tmp_path / "out", "policy")
    for rel, text in SUBST_FILES.items():
        assert (tmp_path / "out" / rel).read_text() == text  # the committed bytes, placeholders and all
    assert exported_bytes(root) == sum(len(t) for t in SUBST_FILES.values()) < MAX_EXPORT_BYTES


def test_ident_and_line_ending_conversions_are_not_applied(policy_repo: Repo, tmp_path: Path):
    files = {
        "policy/id.txt": "$Id$" * 5000,  # each would become $Id: <40 hex> $
        "policy/lines.crlf": "\n" * 20000,
        "policy/wide.utf16": "a" * 20000,
    }
    policy_repo.push(files)
    attributes = "*.txt ident\n*.crlf text eol=crlf\n*.utf16 working-tree-encoding=UTF-16\n"
    (policy_repo.work / ".gitattributes").write_text(attributes)  # added alone: `git add` would convert
    sh_git(policy_repo.work, "add", ".gitattributes")
    sh_git(policy_repo.work, "commit", "-qm", "attributes")
    sh_git(policy_repo.work, "push", "-q", "origin", "HEAD:main")
    sha = sh_git(policy_repo.work, "rev-parse", "HEAD")
    root = export_commit(gitpython.Repo(policy_repo.bare), sha, tmp_path / "out", "policy")
    for rel, text in files.items():
        if rel.startswith("policy/"):
            assert (root / rel.removeprefix("policy/")).read_bytes() == text.encode()


def test_export_ignore_hides_nothing(policy_repo: Repo, source: GitSource, tmp_path: Path):
    files = sample_files("policy")
    hidden = "policy/budgets/ml-research.yaml"
    attributes = f"/{hidden} export-ignore\npolicy/mig/** export-ignore\n"
    sha = policy_repo.push({**files, ".gitattributes": attributes})
    source.fetch()
    root = source.export(sha, tmp_path / "out", "policy")
    for rel, text in files.items():
        assert (root / rel.removeprefix("policy/")).read_text() == text


def test_the_repositorys_own_attribute_files_are_ignored_too(policy_repo: Repo, tmp_path: Path):
    """Attributes from the mirror's info/attributes (or any config) change nothing either."""
    sha = policy_repo.push({"policy/a.txt": PLACEHOLDER})
    (policy_repo.bare / "info").mkdir(exist_ok=True)
    (policy_repo.bare / "info" / "attributes").write_text("* export-subst\n/policy/a.txt export-ignore\n")
    root = export_commit(gitpython.Repo(policy_repo.bare), sha, tmp_path / "out", "policy")
    assert (root / "a.txt").read_text() == PLACEHOLDER


def test_kgwe_plan_sees_what_export_ignore_would_hide(policy_repo: Repo, tmp_path: Path, capsys):
    """`kgwe plan` in CI: a pull request adding a budget it marks export-ignore still shows that budget,
    and placeholders it adds are not expanded under the runner."""
    files = sample_files("clusters/prod")
    policy_repo.push(files)
    budget = files["clusters/prod/budgets/ml-research.yaml"].replace("ml-research", "shadow-team")
    budget = budget.replace("[ml-training, ml-experiments]", "[shadow-ns]")
    policy_repo.push(
        {
            "clusters/prod/budgets/shadow.yaml": budget,
            ".gitattributes": "/clusters/prod/budgets/shadow.yaml export-ignore\n* export-subst\n",
            **{f"clusters/prod/{rel}": text for rel, text in SUBST_FILES.items()},
        }
    )
    args = ["--repo", str(policy_repo.work), "--base", "HEAD~1", "--head", "HEAD", "--no-impact"]
    code = main(["plan", *args, "clusters/prod"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "GPUBudget/shadow-team" in out, out


def test_the_byte_budget_is_counted_while_writing(policy_repo: Repo, tmp_path: Path, monkeypatch):
    """The listing's sizes are checked first; the bytes written are counted again as they are written, so
    no listing (and no conversion) can make an export pass the bound. Here the listing says 0 bytes."""
    from dataclasses import replace

    import kgwe.gitops.source as source_module

    sha = policy_repo.push({f"policy/f{i}.yaml": "x" * 400 for i in range(5)})
    listed = source_module.list_tree

    def understated(*args, **kwargs):
        return [replace(e, size_bytes=0) for e in listed(*args, **kwargs)]

    monkeypatch.setattr(source_module, "list_tree", understated)
    monkeypatch.setattr(source_module, "MAX_EXPORT_BYTES", 1000)
    with pytest.raises(KgweError, match="expands to more than 1000 bytes; refused"):
        export_commit(gitpython.Repo(policy_repo.bare), sha, tmp_path / "out", "policy")
    assert sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file()) <= 1000
