"""Numbers and sizes read from Git are bounded: a demand record with absurd numbers only adds a note to
`kgwe plan`, and a push whose tree expands far beyond its packed size is refused before it is exported."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import orjson
import pytest
import yaml

from kgwe.cli import main
from kgwe.errors import KgweError
from kgwe.gitops.commit_back import MAX_COMMIT_BACK_FILES, CommitBack
from kgwe.gitops.source import MAX_EXPORT_BYTES, MAX_EXPORT_FILES, GitRef, GitSource, export_commit
from kgwe.resources import sample_repo_dir
from tests.security.conftest import Repo, sample_files, sh_git


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sample-repo in Git, then a head commit that changes the scoring (so the impact replay runs). One for
    the module: `kgwe plan` only reads it."""
    policy_repo = Repo(tmp_path_factory.mktemp("sizes"))
    files = sample_files("clusters/prod")
    policy_repo.push(files)
    scoring = "clusters/prod/scoring/default.yaml"
    policy_repo.push({scoring: files[scoring].replace("strategy: BestFit", "strategy: Spread")})
    return policy_repo.work


SHIPPED_RECORD = orjson.loads((sample_repo_dir() / "reports" / "demand-record.json").read_bytes())
# Its first 250 pods: every absurd value below sits in the header or in pod 0, and a replay of 250 pods costs
# a seventh of the whole record's (tests/reconcile/test_plan_command.py replays that one).
RECORD = {**SHIPPED_RECORD, "pods": SHIPPED_RECORD["pods"][:250]}
ABSURD = [0, -1, 1, 2**31, 2**63 - 1, 2**64 - 1, 1e308, 10**30]


def mutations() -> list[tuple[str, object]]:
    """(where, value) pairs: every count, index, time and size in the record set to an absurd number."""
    paths = ["podsSeen", "inventory.nodes", "inventory.gpus.NVIDIA-L40S", "pods.0.0", "pods.0.1", "pods.0.2"]
    paths += ["pods.0.3", "shapes.3.1", "shapes.7.3"]
    out: list[tuple[str, object]] = [(p, v) for p in paths for v in ABSURD]
    out += [("since", "0001-01-01T00:00:00+00:00"), ("until", "9999-12-31T23:59:59+00:00")]
    out += [("generatedAt", "9999-12-31T23:59:59+00:00"), ("pods", []), ("shapes", []), ("teams", [])]
    return out


def mutate(doc: dict, where: str, value: object) -> dict:
    doc = orjson.loads(orjson.dumps(doc))
    *parents, last = where.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return doc


@pytest.mark.parametrize(("where", "value"), mutations(), ids=lambda v: str(v)[:24])
def test_absurd_numbers_in_a_demand_record_give_a_note_never_a_crash(
    repo: Path, tmp_path: Path, capsys, where: str, value: object
) -> None:
    record = tmp_path / "demand.json"
    record.write_text(json.dumps(mutate(RECORD, where, value)))  # json: integers beyond 64 bits too
    args = ["--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--demand", str(record)]
    code = main(["plan", *args, "clusters/prod"])
    out, err = capsys.readouterr()
    assert code == 2, err  # the plan itself: the scoring change
    assert "internal error" not in err and "Traceback" not in err
    assert "### Impact on recorded demand" in out or "> impact skipped: " in out, out


def wide_commit(root: Path, files: int) -> tuple[Path, str]:
    """A bare repository whose branch main holds `files` names of one blob: a tiny push, a huge tree."""
    bare = root / "wide.git"
    sh_git(root, "init", "-q", "--bare", "-b", "main", str(bare))

    def git_in(args: list[str], data: bytes) -> str:
        done = subprocess.run(["git", *args], cwd=bare, input=data, capture_output=True, check=True)
        return done.stdout.decode().strip()

    blob = git_in(["hash-object", "-w", "--stdin"], b"x\n")
    entries = "".join(f"100644 blob {blob}\tf{i:06d}.yaml\n" for i in range(files))
    tree = git_in(["mktree"], entries.encode())
    sha = sh_git(bare, "commit-tree", tree, "-m", "many")
    sh_git(bare, "update-ref", "refs/heads/main", sha)
    return bare, sha


def test_a_tree_with_more_files_than_the_cap_is_refused_before_export(tmp_path: Path) -> None:
    import git as gitpython

    bare, sha = wide_commit(tmp_path, MAX_EXPORT_FILES + 1)
    with pytest.raises(KgweError, match=rf"more than {MAX_EXPORT_FILES} files; refused"):
        export_commit(gitpython.Repo(bare), sha, tmp_path / "out")
    assert not any((tmp_path / "out").iterdir())


def test_commit_back_refuses_a_tree_too_large_to_read(tmp_path: Path) -> None:
    bare, _ = wide_commit(tmp_path, MAX_COMMIT_BACK_FILES + 1)
    cb = CommitBack(str(bare), "main", workdir=tmp_path / "cb", allow_local=True)
    result = cb.commit_files({"reports/a.md": "x\n"}, summary="a")
    assert result.status == "rejected" and f"more than {MAX_COMMIT_BACK_FILES} files" in result.reason
    assert not (tmp_path / "cb" / "repo.git" / "index").exists()


def test_a_small_push_that_expands_beyond_the_byte_cap_is_refused(tmp_path: Path) -> None:
    work, bare = tmp_path / "work", tmp_path / "r.git"
    sh_git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    sh_git(tmp_path, "init", "-q", "-b", "main", str(work))
    (work / "policy").mkdir()
    chunk = b"# padding\n" * ((MAX_EXPORT_BYTES // 10) // 8 + 1)  # compresses to almost nothing
    for i in range(8):
        (work / "policy" / f"pad{i}.yaml").write_bytes(chunk + str(i).encode())
    sh_git(work, "add", "-A")
    sh_git(work, "commit", "-qm", "pad")
    sh_git(work, "push", "-q", str(bare), "HEAD:main")
    packed = sum(f.stat().st_size for f in (bare / "objects").rglob("*") if f.is_file())
    assert packed < MAX_EXPORT_BYTES // 100  # a small push...
    source = GitSource(str(bare), GitRef(branch="main"), cache_dir=tmp_path / "cache", allow_local=True)
    revision = source.fetch()
    with pytest.raises(KgweError, match=rf"more than {MAX_EXPORT_BYTES} bytes; refused"):
        source.export(revision.sha, tmp_path / "out", "policy")  # ...that expands beyond the cap
    assert not any((tmp_path / "out").rglob("*.yaml"))


def test_the_controllers_export_volume_is_bounded_and_holds_the_largest_export(chart) -> None:
    docs = [d for d in yaml.safe_load_all(chart.template()) if d]
    controller = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kgwe-controller"
    )
    pod = controller["spec"]["template"]["spec"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/tmp"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    limit = volume["emptyDir"]["sizeLimit"]
    assert limit.endswith("Mi")
    assert int(limit[:-2]) * 1024 * 1024 >= 2 * MAX_EXPORT_BYTES  # the tree and its archive, at once
