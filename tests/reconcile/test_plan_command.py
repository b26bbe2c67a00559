"""`kgwe plan` on real Git repositories holding sample-repo: exit codes, objects, MIG and policy changes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kgwe.cli import main
from kgwe.resources import sample_repo_dir

ENV = {
    "GIT_AUTHOR_NAME": "a",
    "GIT_AUTHOR_EMAIL": "a@x",
    "GIT_COMMITTER_NAME": "a",
    "GIT_COMMITTER_EMAIL": "a@x",
    "HOME": "/tmp",
    "PATH": "/usr/bin:/bin",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, env=ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "policy"
    shutil.copytree(sample_repo_dir(), root / "clusters" / "prod")
    git(tmp_path, "init", "-q", "-b", "main", str(root))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


def edit(repo: Path, rel: str, old: str, new: str) -> None:
    path = repo / "clusters" / "prod" / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    git(repo, "commit", "-qam", f"edit {rel}")


def plan(repo: Path, capsys, *extra: str) -> tuple[int, str, str]:
    code = main(["plan", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "clusters/prod", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_no_change_exits_0(repo, capsys):
    code = main(["plan", "--repo", str(repo), "--base", "main", "--head", "HEAD", "clusters/prod"])
    out = capsys.readouterr().out
    assert code == 0 and "No changes" in out


def test_mig_share_change_reports_pool_layouts_and_exits_2(repo, capsys):
    edit(repo, "mig/inference-h100.yaml", "1g.10gb: 70%", "1g.10gb: 50%")
    edit(repo, "mig/inference-h100.yaml", "2g.20gb: 20%", "2g.20gb: 40%")
    code = main(["plan", "--repo", str(repo), "--base", "HEAD~2", "--head", "HEAD", "clusters/prod"])
    out = capsys.readouterr().out
    assert code == 2
    assert "| changed | `ConfigMap/gpu-operator/kgwe-mig-parted-config` |" in out
    assert "| inference-h100 |" in out and "MIGStrategy/inference-h100" in out
    assert "70%" in out and "50%" in out


def test_budget_quota_change_shows_quota_and_policy_field(repo, capsys):
    edit(repo, "budgets/ml-research.yaml", "nvidia.com/gpu: 64", "nvidia.com/gpu: 48")
    code, out, _ = plan(repo, capsys)
    assert code == 2
    assert "ResourceQuota/ml-training/" in out and "ResourceQuota/ml-experiments/" in out
    assert "**GPUBudget/ml-research**" in out and "64 → 48" in out


def test_scoring_change_shows_scoring_configmap(repo, capsys):
    edit(repo, "scoring/default.yaml", "strategy: BestFit", "strategy: Spread")
    code, out, _ = plan(repo, capsys)
    assert code == 2 and "ScoringProfile/default" in out and "BestFit → Spread" in out
    assert "kgwe-scoring" in out


def test_busy_gpus_need_a_drain_or_stay_untouched(repo, capsys, tmp_path):
    inv = yaml.safe_load((repo / "clusters/prod/inventory/prod.yaml").read_text())
    for node in inv["spec"]["nodes"]:  # every GPU of every node busy
        devices = {d["index"]: d for d in node.get("devices") or []}
        for i in range(node["gpus"]):
            d = devices.setdefault(i, {"index": i})
            if d.get("mig"):
                d["inUse"] = [d["mig"][0]]
            else:
                d["busy"] = True
        node["devices"] = [devices[i] for i in sorted(devices)]
    inv_file = tmp_path / "busy.yaml"
    inv_file.write_text(yaml.safe_dump(inv))
    edit(repo, "mig/inference-h100.yaml", "1g.10gb: 70%", "1g.10gb: 50%")
    edit(repo, "mig/inference-h100.yaml", "2g.20gb: 20%", "2g.20gb: 40%")
    args = ["plan", "--repo", str(repo), "--head", "HEAD", "clusters/prod", "--inventory", str(inv_file)]
    code = main([*args, "--base", "HEAD~2"])
    out = capsys.readouterr().out
    assert code == 2 and "`" + str(inv_file) + "`" in out
    assert "| inference-h100 |" not in out  # drain: false and every GPU busy: no GPU may change

    edit(repo, "mig/inference-h100.yaml", "drain: false", "drain: true")
    code = main([*args, "--base", "HEAD~3"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| inference-h100 |"))
    assert code == 2 and row.split("|")[4].strip() != "0", row  # nodes to drain


def test_reports_snapshot_is_used_when_present(repo, capsys):
    snap = yaml.safe_load((repo / "clusters/prod/inventory/prod.yaml").read_text())
    snap["spec"]["nodes"] = snap["spec"]["nodes"][:1]
    (repo / "reports" / "prod").mkdir(parents=True)
    (repo / "reports/prod/gpu-inventory.yaml").write_text(yaml.safe_dump(snap))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "snapshot")
    code, out, _ = plan(repo, capsys)  # a pull request adding a snapshot: not read from it, and flagged
    assert code == 0 and "snapshot `reports/prod/gpu-inventory.yaml`" not in out
    assert out.splitlines()[2].startswith(
        "> **Warning**: this pull request changes 1 file(s) under the reports"
    )
    edit(repo, "scoring/default.yaml", "strategy: BestFit", "strategy: Spread")
    code, out, _ = plan(repo, capsys)  # the snapshot at base is read
    assert code == 2 and "snapshot `reports/prod/gpu-inventory.yaml` at base" in out
    assert "> **Warning**" not in out


def test_invalid_head_and_bad_refs_exit_1(repo, capsys):
    edit(repo, "scoring/default.yaml", "strategy: BestFit", "strategy: Sideways")
    code, _, err = plan(repo, capsys)
    assert code == 1 and "scoring/default.yaml:" in err and "nothing planned" in err
    code = main(["plan", "--repo", str(repo), "--base", "nope", "--head", "HEAD"])
    assert code == 1 and "unknown git revision 'nope'" in capsys.readouterr().err
    code = main(
        ["plan", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD~1", "--inventory", "/nonexistent"]
    )
    assert code == 1 and "cannot read inventory" in capsys.readouterr().err


def impact_rows(out: str) -> dict[str, list[str]]:
    section = out.split("### Impact on recorded demand", 1)[1]
    return {
        cells[1]: cells[2:5]
        for line in section.splitlines()
        if line.startswith("| ") and (cells := [c.strip() for c in line.split("|")])
    }


def test_scoring_change_replays_the_shipped_demand_record(repo, capsys):
    edit(repo, "scoring/default.yaml", "strategy: BestFit", "strategy: Spread")
    code, out, _ = plan(repo, capsys)
    assert code == 2
    assert "from `clusters/prod/reports/demand-record.json` at base" in out
    rows = impact_rows(out)
    base, head, _ = rows["pods that waited"]
    assert int(head) > int(base)  # spreading single GPUs strands the 8-GPU jobs
    assert rows["GPU allocation, mean"][0] != rows["GPU allocation, mean"][1]
    assert "cost ml-research (USD)" in rows and "MIG demand served" in rows
    assert "cannot know how long a pod would really have run" in out
    code2, out2, _ = plan(repo, capsys)
    assert (code2, out2) == (code, out)  # deterministic

    code, out, _ = plan(repo, capsys, "--no-impact")
    assert code == 2 and "Impact" not in out and "impact skipped" not in out


def test_demand_file_option_and_bad_records_skip_impact_with_the_reason(repo, capsys, tmp_path):
    edit(repo, "budgets/ml-research.yaml", 'amount: "120000"', 'amount: "1000"')
    record = (repo / "clusters/prod/reports/demand-record.json").read_bytes()
    code, out, _ = plan(repo, capsys)
    assert code == 2 and "GPUBudget/ml-research would be exceeded" in out.split("- head:", 1)[1]

    cases = {
        "truncated.json": (record[: len(record) // 2], "not complete JSON (truncated?)"),
        "other.json": (
            record.replace(b'"NVIDIA-A100-SXM4-80GB":80', b'"NVIDIA-A100-SXM4-80GB":800'),
            "from another inventory",
        ),
        "huge.json": (record + b" " * 2_000_000, "over the 2000000-byte bound; refused"),
    }
    for name, (data, reason) in cases.items():
        (tmp_path / name).write_bytes(data)
        code, out, _ = plan(repo, capsys, "--demand", str(tmp_path / name))
        assert code == 2, name  # the plan itself is unchanged
        assert "### Impact" not in out
        assert f"> impact skipped: `{tmp_path / name}`" in out or "impact skipped: demand record" in out, out
        assert reason in out, name
    code, out, _ = plan(repo, capsys, "--demand", str(tmp_path / "missing.json"))
    assert code == 2 and "impact skipped: cannot read demand record" in out


def test_no_record_means_a_note_and_no_replay(repo, capsys):
    git(repo, "rm", "-q", "clusters/prod/reports/demand-record.json")
    git(repo, "commit", "-qm", "drop record")
    edit(repo, "scoring/default.yaml", "strategy: BestFit", "strategy: Spread")
    code, out, _ = plan(repo, capsys)
    assert code == 2 and "impact skipped: no demand-record.json under reports/ at base" in out


def test_mig_strategy_change_shows_mig_demand_served(repo, capsys):
    edit(repo, "mig/inference-h100.yaml", "1g.10gb: 70%", "1g.10gb: 5%")
    edit(repo, "mig/inference-h100.yaml", "3g.40gb: 10%", "3g.40gb: 75%")
    code = main(["plan", "--repo", str(repo), "--base", "HEAD~2", "--head", "HEAD", "clusters/prod"])
    out = capsys.readouterr().out
    base, head, _ = impact_rows(out)["MIG demand served"]
    assert code == 2 and base == "100.0%" and float(head.rstrip("%")) < 90  # too few 1g.10gb instances left


def test_next_rebalance_is_previewed_from_the_measured_demand_without_changing_the_exit_code(repo, capsys):
    # sample-repo's inventory: 30 pending 3g.40gb pods on inference-h100
    code = main(["plan", "--repo", str(repo), "--base", "main", "--head", "HEAD", "clusters/prod"])
    out = capsys.readouterr().out
    section = out[out.index("### Next MIG rebalance") :]
    assert code == 0
    line = next(x for x in section.splitlines() if x.startswith("- **inference-h100**"))
    assert line.startswith("- **inference-h100**: 30 pending 3g.40gb pods; repartitioning 8 idle GPUs on")
    assert section.count("→ 2×3g.40gb") == 8  # 16 more 3g.40gb on as few GPUs as possible
    assert "training-a100" not in section  # no rebalanceInterval: no rebalancing


def test_next_rebalance_holds_when_the_pool_already_serves_the_demand(repo, capsys):
    edit(repo, "inventory/prod.yaml", "pending: {3g.40gb: 30}", "pending: {3g.40gb: 3}")
    code, out, _ = plan(repo, capsys)
    section = out[out.index("### Next MIG rebalance") :]
    assert "- **inference-h100**: no change:" in section and "has free instances for them" in section
    assert code == 0  # measured demand renders no object; the preview never changes the exit code


def test_a_misspelt_mig_demand_field_is_an_error(repo, capsys):
    edit(repo, "inventory/prod.yaml", "  migDemand:", "  migDemandX:")
    code, _, err = plan(repo, capsys)
    assert code == 1 and "migDemandX" in err  # an unknown field is an error with its place


def test_the_plan_ends_with_where_the_audit_log_is(repo, capsys):
    code, out, _ = plan_no_change(repo, capsys)
    assert code == 0 and out.rstrip().splitlines()[-1].startswith("Audit log: none at base yet")
    assert "<spec.reports.path>/audit/<YYYY-MM>.jsonl" in out
    (repo / "reports" / "prod" / "audit").mkdir(parents=True)
    for month in ("2026-10", "2026-11"):
        (repo / "reports/prod/audit" / f"{month}.jsonl").write_text('{"revision": "sha1:..."}\n')
    (repo / "reports/prod/audit/notes.jsonl").write_text("not a month\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the controller's audit log")
    edit(repo, "scoring/default.yaml", "strategy: BestFit", "strategy: Spread")  # a pull request on top
    code, out, _ = plan(repo, capsys)
    newest = "reports/prod/audit/2026-11.jsonl"
    assert code == 2 and out.rstrip().splitlines()[-1].startswith(
        f"Audit log: [`{newest}`]({newest}) at base"
    )


def plan_no_change(repo: Path, capsys) -> tuple[int, str, str]:
    code = main(["plan", "--repo", str(repo), "--base", "main", "--head", "HEAD", "clusters/prod"])
    out, err = capsys.readouterr()
    return code, out, err
