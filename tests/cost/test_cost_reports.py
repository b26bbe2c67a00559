"""`kgwe report` end to end: a real SQLite store, the sample policy repository, Markdown/CSV files,
and commit-back into a real local Git repository with a concurrent human push."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from kgwe.cli import main
from kgwe.cost.store import CostStore
from kgwe.cost.usage import NodeCapacity, UsageInterval
from kgwe.resources import sample_repo_dir

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
T0 = datetime(2026, 10, 1, tzinfo=UTC)


@pytest.fixture
def db(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'cost.db'}"
    store = CostStore(url)
    store.migrate()
    store.set_node(NodeCapacity("h0", H100, 8, T0 - timedelta(days=40)))
    store.set_node(NodeCapacity("a0", A100, 8, T0 - timedelta(days=40)))
    rows = []
    for day in range(-30, 30):
        start = T0 + timedelta(days=day, hours=2)
        hours = timedelta(hours=1)
        rows.append(
            UsageInterval(
                f"train-{day}",
                "ml-training",
                "ml-research",
                "a0",
                A100,
                "whole",
                4,
                start,
                start + 18 * hours,
                pod_uid=f"t{day}",
            )
        )
        rows.append(
            UsageInterval(
                f"serve-{day}",
                "inference-prod",
                "inference-platform",
                "h0",
                H100,
                "mig",
                3,
                start,
                start + 20 * hours,
                mig_profile="2g.20gb",
                pod_uid=f"s{day}",
            )
        )
        rows.append(
            UsageInterval(
                f"nb-{day}",
                "ds-notebooks",
                "data-science",
                "h0",
                H100,
                "shared",
                1,
                start,
                start + 8 * hours,
                gpu_milli=500,
                pod_uid=f"n{day}",
            )
        )
    store.add_usage(rows)
    store.close()
    return url


OCTOBER = ["report", "--since", "2026-10-01", "--until", "2026-11-01"]


def run_report(db, out, *extra, now="2026-10-20T12:00:00Z"):
    return main(
        [
            *OCTOBER,
            "--db",
            db,
            "--policy",
            str(sample_repo_dir()),
            "--cluster",
            "prod",
            "--now",
            now,
            "--out",
            str(out),
            *extra,
        ]
    )


def test_report_files_conserve_cost(db, tmp_path, capsys):
    assert run_report(db, tmp_path / "out") == 0
    folder = tmp_path / "out" / "reports" / "prod" / "2026-10-01_2026-11-01"
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "budgets.csv",
        "budgets.md",
        "chargeback.csv",
        "chargeback.md",
        "efficiency.csv",
        "efficiency.md",
        "forecast.csv",
        "forecast.md",
        "inventory.yaml",
        "pod-predictions.csv",
        "pod-predictions.md",
        "rightsizing.csv",
        "rightsizing.md",
        "runs.csv",
        "runs.md",
        "spot.csv",
        "spot.md",
    ]
    rows = list(csv.DictReader(io.StringIO((folder / "chargeback.csv").read_text())))
    total = sum(Decimal(r["cost"]) for r in rows)
    printed = capsys.readouterr().out
    assert f"cluster GPU cost {total} USD" in printed
    md = (folder / "chargeback.md").read_text()
    assert f"**{total}**" in md and "| ml-research |" in md and "`__idle__`" in md
    budgets = list(csv.DictReader(io.StringIO((folder / "budgets.csv").read_text())))
    assert {b["budget"] for b in budgets} == {"data-science", "inference-platform", "ml-research"}
    assert all(Decimal(b["forecast_end"]) >= Decimal(b["spent"]) for b in budgets)
    forecast = list(csv.DictReader(io.StringIO((folder / "forecast.csv").read_text())))
    assert len(forecast) == 3 * 7
    import yaml

    inventory = yaml.safe_load((folder / "inventory.yaml").read_text())
    assert sorted(n["name"] for n in inventory["spec"]["nodes"]) == ["a0", "h0"]
    # without --workloads: efficiency per team from metering alone, spot and runs say what they miss
    assert "No GPUWorkloads were read" in (folder / "spot.md").read_text()
    assert "no GPUWorkloads read (--workloads FILE)" in printed
    teams = {r["subject"] for r in csv.DictReader(io.StringIO((folder / "efficiency.csv").read_text()))}
    assert teams == {"data-science", "inference-platform", "ml-research"}
    assert "**Allocation only:**" in (folder / "efficiency.md").read_text()


def test_report_advises_spot_efficiency_and_cost_per_run_from_gpuworkloads(tmp_path, capsys):
    import yaml

    url = f"sqlite:///{tmp_path / 'cost.db'}"
    store = CostStore(url)
    store.migrate()
    store.set_node(NodeCapacity("a0", A100, 8, T0 - timedelta(days=1)))
    store.set_node(NodeCapacity("a1", A100, 8, T0 - timedelta(days=1)))
    start = T0 + timedelta(days=1)

    def pod(name, node, hours, offset=0):
        begin = start + timedelta(hours=offset)
        return UsageInterval(
            name,
            "ml-training",
            "ml-research",
            node,
            A100,
            "whole",
            8,
            begin,
            begin + timedelta(hours=hours),
            pod_uid=name,
        )

    store.add_usage(
        [
            pod("llm-r0-worker-0-aaaaa", "a0", 1),  # failed attempt
            pod("llm-r1-worker-0-bbbbb", "a0", 10, offset=2),
            pod("llm-r1-worker-1-ccccc", "a1", 10, offset=2),
        ]
    )
    store.close()
    workload = {
        "apiVersion": "kgwe.nvidia.io/v1",
        "kind": "GPUWorkload",
        "metadata": {"name": "llm", "namespace": "ml-training", "creationTimestamp": "2026-10-02T00:00:00Z"},
        "spec": {
            "gpuRequirements": {"count": 8},
            "distributedConfig": {"nodes": 2},
            "checkpointInterval": "1h",
        },
        "status": {
            "phase": "Succeeded",
            "run": 1,
            "conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": "2026-10-02T12:00:00Z"}
            ],
        },
    }
    listing = tmp_path / "workloads.yaml"
    listing.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [workload]}))
    assert run_report(url, tmp_path / "out", "--workloads", str(listing)) == 0
    printed = capsys.readouterr().out
    folder = tmp_path / "out" / "reports" / "prod" / "2026-10-01_2026-11-01"
    (spot,) = list(csv.DictReader(io.StringIO((folder / "spot.csv").read_text())))
    # 168 on-demand GPU-h (8 + 80 + 80) x (2.45 - 0.98) = 246.96 in the 19.5 days to --now
    assert (spot["workload"], spot["movable"], spot["saving"]) == ("llm", "True", "246.96")
    assert "20% a month" in (folder / "spot.md").read_text()
    (run,) = list(csv.DictReader(io.StringIO((folder / "runs.csv").read_text())))
    # every attempt at 2.45: 168 GPU-h = 411.60, of which the failed first attempt 8 GPU-h = 19.60
    assert (run["attempts"], run["cost"], run["failed_attempts_cost"]) == ("2", "411.60", "19.60")
    levels = {
        (r["level"], r["subject"])
        for r in csv.DictReader(io.StringIO((folder / "efficiency.csv").read_text()))
    }
    assert levels == {("team", "ml-research"), ("workload", "ml-training/llm")}
    assert "spot: 1 GPUWorkload(s) could move" in printed and "ml-research 1 at 411.60 USD mean" in printed

    listing.write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    assert run_report(url, tmp_path / "out", "--workloads", str(listing)) == 1
    assert "holds a ConfigMap, not a GPUWorkload" in capsys.readouterr().err
    listing.write_text("items: [\n")
    assert run_report(url, tmp_path / "out", "--workloads", str(listing)) == 1
    assert "not YAML" in capsys.readouterr().err


def test_bad_input_is_one_clear_error(db, tmp_path, capsys):
    assert (
        main(["report", "--since", "yesterday", "--until", "2026-11-01", "--db", db, "--out", str(tmp_path)])
        == 1
    )
    assert "not a date" in capsys.readouterr().err
    assert (
        main(
            [
                *OCTOBER,
                "--db",
                str(tmp_path / "none.db"),
                "--policy",
                str(sample_repo_dir()),
                "--out",
                str(tmp_path),
            ]
        )
        == 1
    )
    assert "no cost database" in capsys.readouterr().err
    no_prices = tmp_path / "policy"
    shutil.copytree(sample_repo_dir() / "budgets", no_prices)
    assert (
        main(
            [
                "report",
                "--since",
                "2026-10-01",
                "--until",
                "2026-11-01",
                "--db",
                db,
                "--policy",
                str(no_prices),
                "--out",
                str(tmp_path),
            ]
        )
        == 1
    )
    assert "no PricingCatalog" in capsys.readouterr().err


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=Human", "-c", "user.email=h@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_reports_are_committed_back_and_a_concurrent_push_is_kept(db, tmp_path):
    remote = tmp_path / "policy.git"
    git(tmp_path, "init", "--bare", "-b", "main", str(remote))
    human = tmp_path / "human"
    git(tmp_path, "clone", str(remote), str(human))
    (human / "README.md").write_text("policy\n")
    git(human, "add", "README.md")
    git(human, "commit", "-m", "init")
    git(human, "push", "origin", "HEAD:main")

    out = tmp_path / "out"
    assert run_report(db, out, "--commit-back", str(remote)) == 0
    # a human pushes while the bot's clone is behind
    git(human, "pull", "--rebase", "origin", "main")
    (human / "budgets.yaml").write_text("# edited by a human\n")
    git(human, "add", "budgets.yaml")
    git(human, "commit", "-m", "human change")
    git(human, "push", "origin", "HEAD:main")
    assert run_report(db, out, "--commit-back", str(remote), now="2026-10-25T00:00:00Z") == 0
    log = git(human, "--git-dir", str(remote), "log", "--format=%an %s", "main")
    assert "Human human change" in log and log.count("kgwe-bot") == 2
    files = git(human, "--git-dir", str(remote), "ls-tree", "-r", "--name-only", "main")
    assert "budgets.yaml" in files and "reports/prod/2026-10-01_2026-11-01/chargeback.md" in files
    # the same report again: nothing changed, so no empty commit
    assert run_report(db, out, "--commit-back", str(remote), now="2026-10-25T00:00:00Z") == 0
    assert git(human, "--git-dir", str(remote), "log", "--format=%an", "main").count("kgwe-bot") == 2


def test_service_refreshes_metrics_and_budget_status(db):
    from prometheus_client import CollectorRegistry, generate_latest

    from kgwe.cost.budgets import budget_from_policy
    from kgwe.cost.metrics import install
    from kgwe.cost.pricing import pricebook_from_catalog
    from kgwe.cost.service import CostService
    from kgwe.policy.loader import load_repository
    from kgwe.policy.pricing import PricingCatalog

    policy = load_repository(sample_repo_dir())
    book = pricebook_from_catalog(policy.objects(PricingCatalog)[0])
    budgets = [budget_from_policy(b) for b in policy.budgets]
    registry = CollectorRegistry()
    service = CostService(CostStore(db), cluster="prod", collector=install(registry))
    statuses = service.refresh(book, budgets, datetime(2026, 10, 20, 12, tzinfo=UTC))
    assert {s.name: s.spent > 0 for s in statuses} == {
        "data-science": True,
        "inference-platform": True,
        "ml-research": True,
    }
    text = generate_latest(registry).decode()
    assert 'kgwe_budget_used_ratio{budget="ml-research"' in text and "kgwe_idle_gpu_cost{" in text
    assert 'kgwe_cost_efficiency_score{basis="allocation only",team="ml-research"}' in text


def test_service_recomputes_the_advice_metrics_at_its_own_pace(db):
    from prometheus_client import CollectorRegistry, generate_latest

    from kgwe.cost.metrics import install
    from kgwe.cost.pricing import pricebook_from_catalog
    from kgwe.cost.service import CostService
    from kgwe.policy.loader import load_repository
    from kgwe.policy.pricing import PricingCatalog

    book = pricebook_from_catalog(load_repository(sample_repo_dir()).objects(PricingCatalog)[0])
    registry = CollectorRegistry()
    service = CostService(CostStore(db), cluster="prod", collector=install(registry), advice_seconds=600)
    reads = []
    workload = {
        "apiVersion": "kgwe.nvidia.io/v1",
        "kind": "GPUWorkload",
        "metadata": {"name": "train", "namespace": "ml-training"},
        "spec": {"gpuRequirements": {"count": 4}},
    }
    service.workloads = lambda: reads.append(1) or [workload]
    now = datetime(2026, 10, 20, 12, tzinfo=UTC)
    service.refresh(book, [], now)
    service.refresh(book, [], now + timedelta(seconds=300))  # metrics refresh, the advice stays
    assert len(reads) == 1
    service.refresh(book, [], now + timedelta(seconds=600))
    assert len(reads) == 2
    # pods train-<day> are not the controller's children: the workload has no pods, so no spot series
    assert "kgwe_spot_saving_per_month{" not in generate_latest(registry).decode()

    def unreachable():
        raise OSError("connection refused")

    service.workloads = unreachable  # a failed read leaves the advice without workloads, never the refresh
    service.refresh(book, [], now + timedelta(seconds=1200))
    assert "kgwe_cost_efficiency_score{" in generate_latest(registry).decode()


def test_report_rightsizes_metered_pods_from_prometheus(db, tmp_path):
    import json

    from tests.harness.dcgm import serve_query_range

    def matrix(path):
        value = 0.3 if "ENGINE_ACTIVE" in path else 30_000
        result = [
            {
                "metric": {"namespace": "ml-training", "pod": f"train-{d}"},
                "values": [[1790812800 + 60 * i, str(value)] for i in range(30)],
            }
            for d in range(-3, 3)
        ]
        return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()

    with serve_query_range(matrix) as url:
        assert run_report(db, tmp_path / "out", "--prometheus", url) == 0
    folder = tmp_path / "out" / "reports" / "prod" / "2026-10-01_2026-11-01"
    rows = list(csv.DictReader(io.StringIO((folder / "rightsizing.csv").read_text())))
    # train-* pods hold 4 whole A100s but use 0.3 GPU and 30 GB: the smallest covering MIG profile is 3g.40gb
    assert {r["pod"] for r in rows} == {f"train-{d}" for d in range(0, 3)}  # only pods metered in October
    assert {(r["current"], r["recommended"], r["downsizable"]) for r in rows} == {
        ("4× GPU", "1× MIG 3g.40gb", "True")
    }


def test_one_cost_collector_per_registry():
    # Several CostServices in one process (controller + report command, tests) share the registry's collector;
    # a second registration of the same series would raise DuplicateTimeseries.
    from prometheus_client import CollectorRegistry

    from kgwe.cost.metrics import install

    registry, other = CollectorRegistry(), CollectorRegistry()
    assert install(registry) is install(registry)
    assert install(other) is not install(registry)


def test_demand_record_of_the_last_week_from_the_store(db):
    from kgwe.impact.record import Shape, decode, demand_record_file

    now = T0 + timedelta(days=10)
    files = demand_record_file(CostStore(db), now, "prod")
    assert list(files) == ["reports/demand-record.json"]
    data = files["reports/demand-record.json"].encode()
    assert b"train-" not in data and b"serve-" not in data  # no pod names
    record = decode(data)
    assert record.since == now - timedelta(days=7) and record.until == now
    assert record.gpus_by_product == {A100: 8, H100: 8}
    # a training, a serving and a notebook pod a day from 02:00 (18, 20, 8 h): the seven days of the window
    teams = [record.teams[p.team][1] for p in record.pods]
    assert teams.count("ml-research") == teams.count("inference-platform") == teams.count("data-science") == 7
    by_team = {record.teams[p.team][1]: p for p in reversed(record.pods)}  # each team's first pod
    assert (by_team["ml-research"].arrival_s, by_team["ml-research"].end_s) == (2 * 3600, 20 * 3600)
    assert record.shapes[by_team["inference-platform"].shape] == Shape("mig", 3, "2g.20gb")
    assert record.shapes[by_team["data-science"].shape] == Shape("shared", 1, gpu_milli=500)
