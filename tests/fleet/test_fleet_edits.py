"""`kgwe strategy` edits, `kgwe template` for every type, budget thresholds, and the fleet commands' start-up
cost (pure or local: no cluster)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kgwe import cli
from kgwe.errors import KgweError
from kgwe.fleet.status import budget_rows
from kgwe.fleet.strategy import insert_strategy, replace_strategy
from kgwe.fleet.template import TYPES, template
from kgwe.policy.gpu_workload import GPUWorkload
from kgwe.policy.loader import load_repository

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("kubernetes", "scipy", "statsmodels", "sqlalchemy", "sqlmodel", "git", "numpy", "jinja2")


@pytest.mark.parametrize("workload_type", TYPES)
def test_every_template_validates(workload_type, tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(template(workload_type, name="job-1", namespace="ml"))
    ps = load_repository(path)
    assert ps.ok, [str(d) for d in ps.diagnostics]
    (wl,) = ps.objects(GPUWorkload)
    assert wl.spec.workload_type == workload_type and wl.name == "job-1"


def test_replace_keeps_quotes_comments_and_flow_maps():
    text = 'spec: {strategy: "BestFit", weights: {topology: 1}}  # keep\n'
    assert (
        replace_strategy(text, 1, 8, "Spread") == "spec: {strategy: Spread, weights: {topology: 1}}  # keep\n"
    )
    text = "spec:\r\n  strategy: 'BestFit'   # why\r\n"
    assert replace_strategy(text, 2, 3, "BinPack") == "spec:\r\n  strategy: BinPack   # why\r\n"
    with pytest.raises(KgweError, match="by hand"):
        replace_strategy("spec:\n  weights: {}\n", 2, 3, "Spread")


def test_insert_into_a_block_spec_and_refuse_an_inline_one():
    text = "spec:   # the profile\n    default: true\n"
    assert (
        insert_strategy(text, 1, 5, "Spread")
        == "spec:   # the profile\n    strategy: Spread\n    default: true\n"
    )
    with pytest.raises(KgweError, match="inline"):
        insert_strategy("spec: {default: true}\n", 1, 3, "Spread")


def _strategy(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["strategy", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_strategy_adds_a_missing_key_and_names_the_file(tmp_path, capsys):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "sample-repo", repo)
    profile = repo / "scoring" / "topology-first.yaml"
    profile.write_text(profile.read_text().replace("  strategy: BestFit\n", ""))
    code, out, err = _strategy(capsys, "Spread", "--repo", str(repo), "--profile", "topology-first")
    assert code == 0, err
    assert "+  strategy: Spread\n" in out and out.startswith("--- a/scoring/topology-first.yaml\n")
    assert "changed ScoringProfile/topology-first to Spread" in err
    assert load_repository(repo).ok
    assert "  strategy: Spread\n" in profile.read_text()


def test_strategy_dry_run_writes_nothing_and_bad_names_suggest(tmp_path, capsys):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "sample-repo", repo)
    before = (repo / "scoring" / "default.yaml").read_text()
    code, out, _ = _strategy(capsys, "LeastLoaded", "--repo", str(repo), "--dry-run")
    assert code == 0 and "+  strategy: LeastLoaded" in out
    assert (repo / "scoring" / "default.yaml").read_text() == before

    code, out, err = _strategy(capsys, "spred", "--repo", str(repo))
    assert (code, out) == (1, "") and '(did you mean "Spread"?)' in err
    code, out, err = _strategy(capsys, "Spread", "--repo", str(repo), "--profile", "defualt")
    assert (code, out) == (1, "") and '(did you mean "default"?)' in err
    code, out, err = _strategy(capsys, "Spread", "--repo", str(tmp_path / "nope"))
    assert (code, out) == (1, "") and "not a directory" in err
    assert (repo / "scoring" / "default.yaml").read_text() == before


def test_strategy_refuses_a_symlinked_profile(tmp_path, capsys):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "sample-repo", repo)
    outside = tmp_path / "outside.yaml"
    shutil.move(repo / "scoring" / "default.yaml", outside)
    (repo / "scoring" / "default.yaml").symlink_to(outside)
    before = outside.read_text()
    code, _, err = _strategy(capsys, "Spread", "--repo", str(repo))
    assert code == 1
    assert "scoring/default.yaml:1:1: error: symlink leaves the repository" in err
    assert "no default ScoringProfile found; name the profile to change with --profile" in err
    assert outside.read_text() == before
    assert "strategy: BestFit" in (repo / "scoring" / "topology-first.yaml").read_text()


@pytest.mark.parametrize(
    ("hard", "used", "listed"), [("10", "7", False), ("10", "8", True), ("4", "4", True), ("0", "0", False)]
)
def test_quota_is_near_its_limit_from_80_percent(hard, used, listed):
    quota = {
        "metadata": {"name": "kgwe-budget", "namespace": "ml", "annotations": {"kgwe.nvidia.io/budget": "b"}},
        "spec": {"hard": {"requests.nvidia.com/gpu": hard}},
        "status": {"used": {"requests.nvidia.com/gpu": used}},
    }
    assert bool(budget_rows([], [quota])) is listed


@pytest.mark.parametrize("argv", [["template"], ["strategy", "Spread", "--repo", "sample-repo", "--dry-run"]])
def test_local_commands_import_no_heavy_module(argv):
    probe = (
        "import sys\nfrom kgwe import cli\ncode = cli.main(sys.argv[1:])\n"
        f"print('HEAVY:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))\nsys.exit(code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "HEAVY:"


def test_submit_needs_a_name_and_sends_nothing_on_errors(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    text = template("Batch")
    path.write_text(text.replace("metadata:\n  name: my-batch\n", ""))
    assert cli.main(["submit", str(path), "--dry-run=client"]) == 1
    err = capsys.readouterr().err
    assert "w.yaml:3:1: error: GPUWorkload metadata.name: required to submit" in err
    assert err.endswith("nothing submitted\n")
    path.write_text(text)
    assert cli.main(["submit", str(path), "--dry-run=client"]) == 0
    assert capsys.readouterr().out == "gpuworkload.kgwe.nvidia.io/my-batch valid (client dry run)\n"


@pytest.mark.parametrize(("word", "strategy"), [("best_fit", "BestFit"), ("least_utilized", "LeastLoaded")])
def test_strategy_takes_the_seeds_spellings_as_convert_does(tmp_path, capsys, word, strategy):
    from kgwe.vocab import strategy_for_word

    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "sample-repo", repo)
    profile = repo / "scoring" / "topology-first.yaml"
    profile.write_text(profile.read_text().replace("strategy: BestFit", "strategy: Spread"))
    code, diff, err = _strategy(capsys, word, "--repo", str(repo), "--profile", "topology-first")
    assert code == 0 and f"+  strategy: {strategy}" in diff and f'"{word}" is {strategy}' in err
    assert f"  strategy: {strategy}\n" in profile.read_text()
    assert strategy_for_word(word) == strategy  # the map `kgwe convert` uses
