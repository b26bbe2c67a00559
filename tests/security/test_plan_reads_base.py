"""`kgwe plan` cannot be steered by the pull request it plans: the controller's inventory snapshot and demand
record are read from the base, never from the PR's head, and a PR that changes anything under the reports
folder is flagged at the top of the plan. (A PR that also edited the snapshot to mark every GPU idle used to
show 0 nodes to drain instead of all of them; one that edited the demand record chose the impact figures.)"""

from __future__ import annotations

import json

import yaml

from kgwe.cli import main
from kgwe.resources import sample_repo_dir
from tests.security.conftest import Repo, sample_files

POOL = "clusters/prod/mig/inference-h100.yaml"
SNAPSHOT = "reports/prod/gpu-inventory.yaml"
RECORD = "clusters/prod/reports/demand-record.json"


def busy_snapshot(busy: bool) -> str:
    """The repository's inventory as the controller's snapshot, every GPU of every node busy or idle."""
    inventory = yaml.safe_load((sample_repo_dir() / "inventory" / "prod.yaml").read_text())
    for node in inventory["spec"]["nodes"]:
        devices = {d["index"]: d for d in node.get("devices") or []}
        for i in range(node["gpus"]):
            device = devices.setdefault(i, {"index": i})
            device.pop("busy", None)
            device.pop("inUse", None)
            if busy:
                if device.get("mig"):
                    device["inUse"] = [device["mig"][0]]
                else:
                    device["busy"] = True
        node["devices"] = [devices[i] for i in sorted(devices)]
    return yaml.safe_dump(inventory)


def plan(repo: Repo, capsys, *extra: str) -> tuple[int, str, str]:
    args = ["plan", "--repo", str(repo.work), "--base", "HEAD~1", "--head", "HEAD", *extra, "clusters/prod"]
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def drains(out: str) -> str:
    row = next(line for line in out.splitlines() if line.startswith("| inference-h100 |"))
    return row.split("|")[4].strip()


def test_the_snapshot_is_read_from_the_base(policy_repo: Repo, capsys) -> None:
    files = sample_files("clusters/prod")
    policy_repo.push(
        {**files, POOL: files[POOL].replace("drain: false", "drain: true"), SNAPSHOT: busy_snapshot(True)}
    )
    change = files[POOL].replace("drain: false", "drain: true").replace("1g.10gb: 70%", "1g.10gb: 50%")
    change = change.replace("2g.20gb: 20%", "2g.20gb: 40%")
    policy_repo.push({POOL: change})
    code, honest, _ = plan(policy_repo, capsys)
    assert code == 2 and drains(honest) != "0"  # every GPU busy: each changed node needs a drain

    policy_repo.push({SNAPSHOT: busy_snapshot(False)})  # the same PR now also says every GPU is idle
    code, steered, err = plan(policy_repo, capsys, "--base", "HEAD~2")
    assert code == 2
    assert drains(steered) == drains(honest), steered
    assert f"snapshot `{SNAPSHOT}` at base" in steered
    warning = next(line for line in steered.splitlines() if line.startswith("> **Warning**"))
    assert SNAPSHOT in warning and "reports" in warning
    assert SNAPSHOT in err  # said on stderr too, for a CI log


def impact(out: str) -> str:
    return out[out.index("### Impact on recorded demand") :].split("\n### ", 1)[0]


def test_the_demand_record_is_read_from_the_base(policy_repo: Repo, capsys) -> None:
    files = sample_files("clusters/prod")
    policy_repo.push(files)
    scoring = "clusters/prod/scoring/default.yaml"
    policy_repo.push({scoring: files[scoring].replace("strategy: BestFit", "strategy: Spread")})
    code, honest, _ = plan(policy_repo, capsys)
    assert code == 2

    record = json.loads(files[RECORD])
    record["pods"] = record["pods"][:10]  # the PR also says hardly anything ran
    policy_repo.push({RECORD: json.dumps(record)})
    code, steered, _ = plan(policy_repo, capsys, "--base", "HEAD~2")
    assert code == 2
    assert impact(steered) == impact(honest)
    assert f"`{RECORD}` at base" in honest
    assert any(line.startswith("> **Warning**") and RECORD in line for line in steered.splitlines())
