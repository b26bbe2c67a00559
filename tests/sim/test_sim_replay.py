"""openb replay: FGD sampling method, the allocation-ratio metric, the real trace files and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from kgwe.cli import main
from kgwe.errors import KgweError
from kgwe.extender.nodes import NodeState
from kgwe.extender.profile import Profile
from kgwe.extender.request import PodRequest
from kgwe.sim.openb import (
    POLICIES,
    WORKLOADS,
    TracePod,
    load_nodes,
    load_pods,
    openb_dir,
    published,
    workload_mix,
)
from kgwe.sim.replay import replay, sample_pods

REPO = Path(__file__).resolve().parents[2]


def test_sampling_reaches_130_percent_and_is_seeded() -> None:
    pods = [
        TracePod(PodRequest(gpus=1)),
        TracePod(PodRequest(gpus=1, gpu_milli=250)),
        TracePod(PodRequest(cpu_milli=1000)),
    ]
    capacity = 10_000
    drawn = sample_pods(pods, capacity, seed=7)
    total = sum(p.gpu_milli_total for p in drawn)
    assert total >= 1.3 * capacity
    assert total - drawn[-1].gpu_milli_total < 1.3 * capacity  # stops at the first pod that crosses
    assert [id(p) for p in sample_pods(pods, capacity, seed=7)] == [id(p) for p in drawn]
    assert [id(p) for p in sample_pods(pods, capacity, seed=8)] != [id(p) for p in drawn]


def test_allocation_ratio_on_a_tiny_cluster() -> None:
    nodes = [
        NodeState("a", gpus=2, cpu_milli=8000, memory_mib=8192),
        NodeState("b", gpus=2, cpu_milli=8000, memory_mib=8192),
    ]
    pods = [TracePod(PodRequest(gpus=1, cpu_milli=1000, memory_mib=1024))]
    r = replay(nodes, pods, Profile(), seed=1)
    # 6 one-GPU pods arrive for 4 GPUs: 4 placed, 2 rejected; at 100% arrived all 4 GPUs are allocated
    assert (r.pods_arrived, r.pods_failed) == (6, 2)
    assert r.alloc_ratio_100 == pytest.approx(100.0) and r.alloc_ratio_130 == pytest.approx(100.0)


def test_cpu_shortage_strands_gpus() -> None:
    nodes = [NodeState("a", gpus=2, cpu_milli=1000, memory_mib=8192)]
    pods = [TracePod(PodRequest(gpus=1, cpu_milli=1000))]
    r = replay(nodes, pods, Profile(), seed=1)
    assert r.alloc_ratio_130 == pytest.approx(50.0)  # the second GPU has no CPU left to go with it


def test_openb_files_match_the_published_facts() -> None:
    nodes = load_nodes()
    assert len(nodes) == 1523 and sum(n.gpus for n in nodes) == 6212
    pods = load_pods("default")
    assert len(pods) == 8152
    assert round(sum(p.gpu_milli_total for p in pods) / 1000, 1) == 6086.8
    mix = workload_mix(pods)
    assert abs(sum(t.weight for t in mix) - 0.995) < 0.01 and all(t.gpus for t in mix)
    pub = published()
    assert {w for w, _ in pub} == set(WORKLOADS) and {p for _, p in pub} == set(POLICIES)
    assert pub[("default", "FGD")][1] == pytest.approx(95.39, abs=0.01)
    assert pub[("default", "BestFit")][1] == pytest.approx(93.08, abs=0.01)


def test_mix_tells_shapes_apart_by_cpu_and_memory() -> None:
    # Three 1-GPU pods with 8 cores, one with 120: two shapes, as the extender observes them, so the rare
    # CPU-heavy shape keeps its own weight instead of taking the common shape's CPU.
    small = PodRequest(gpus=1, cpu_milli=8000, memory_mib=16384)
    big = PodRequest(gpus=1, cpu_milli=120000, memory_mib=16384)
    pods = [TracePod(small)] * 3 + [TracePod(big), TracePod(PodRequest(cpu_milli=4000))]
    mix = workload_mix(pods, coverage=1.0)
    shapes = [(t.cpu_milli, t.memory_mib, t.weight) for t in mix]
    assert shapes == [(8000, 16384, 0.75), (120000, 16384, 0.25)]


def test_gpu_spec_constrains_models() -> None:
    pods = load_pods("gpuspec33")
    constrained = [p for p in pods if p.req.products]
    assert len(constrained) == 2388
    assert any(p.req.products == ("v100m16", "v100m32") for p in constrained)


def test_simulate_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    """The command in-process (its own process is started by the missing-trace test below)."""
    argv = ["simulate", "--workload", "multigpu20", "--seeds", "1", "--json", "--jobs", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    row = orjson.loads(out.strip().splitlines()[-1])
    assert row["workload"] == "multigpu20" and row["seeds"] == 1
    assert 50.0 < row["alloc_ratio_100"] <= row["alloc_ratio_130"] <= 100.0  # no departures: never decreases
    assert set(row["published_130"]) == set(POLICIES)


def test_missing_trace_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KgweError, match="trace file not found"):
        load_nodes(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "kgwe.cli", "simulate", "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 1 and "trace file not found" in proc.stderr and "Traceback" not in proc.stderr


def test_kgwe_data_is_honoured_and_never_silently_bypassed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KGWE_DATA", str(tmp_path))
    assert openb_dir() == tmp_path / "alibaba-gpu-v2023"
    monkeypatch.setenv("KGWE_DATA", str(tmp_path / "missing"))
    with pytest.raises(KgweError, match="is not a directory"):
        openb_dir()
