"""`kgwe convert`: the GPU_Orchestrator and AgentaFlow seed examples become valid kgwe.nvidia.io/v1."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kgwe.cli import main
from kgwe.policy import GPUWorkload, load_repository
from kgwe.policy.workload_resolution import Facts
from kgwe.workloads.convert import ConvertError, convert, mib_to_gb, strategy
from kgwe.workloads.plan import plan_children

FIXTURES = Path(__file__).parent / "fixtures"


def test_gpu_orchestrator_example(tmp_path, capsys):
    out = tmp_path / "wl.yaml"
    src = FIXTURES / "gpu-orchestrator-my-model.yaml"
    assert main(["convert", str(src), "--image", "busybox:1.36", "--out", str(out)]) == 0
    report = capsys.readouterr().err
    assert "spec.gpuCount -> spec.gpuRequirements.count: 2" in report
    assert "spec.schedulingStrategy -> spec.schedulingStrategy: 'LeastLoaded'" in report
    assert "spec.retryPolicy.backoffSeconds -> spec.retryPolicy.backoffSeconds: 30" in report
    assert "spec.podTemplate: NOT MAPPED" in report  # the seed has none: said, not hidden
    doc = yaml.safe_load(out.read_text())
    assert doc["spec"]["priority"] == "high"
    assert doc["metadata"]["labels"]["kgwe.nvidia.io/model"] == "llama2"
    assert doc["spec"]["podTemplate"]["spec"]["containers"] == [{"name": "llama2", "image": "busybox:1.36"}]
    assert main(["validate", str(out)]) == 0


def test_gpu_orchestrator_without_image_is_a_clear_error(capsys):
    assert main(["convert", str(FIXTURES / "gpu-orchestrator-my-model.yaml")]) == 1
    assert "pass --image" in capsys.readouterr().err


def test_agentaflow_example(tmp_path, capsys):
    out = tmp_path / "wl.yaml"
    assert main(["convert", str(FIXTURES / "agentaflow-my-training-job.yaml"), "-o", str(out)]) == 0
    report = capsys.readouterr().err
    assert "spec.gpuRequirements.exclusiveAccess -> spec.exclusiveAccess: True" in report
    assert "nvidia.com/gpu] -> spec.gpuRequirements: 1" in report
    assert "NOT MAPPED" not in report
    doc = yaml.safe_load(out.read_text())
    spec = doc["spec"]
    assert spec["priority"] == 5
    assert spec["schedulingStrategy"] == "LeastLoaded"
    assert spec["gpuRequirements"] == {"count": 1, "minMemoryGB": 8.59}
    assert "resources" not in spec["podTemplate"]["spec"]["containers"][0]  # GPUs come from gpuRequirements
    ps = load_repository(out)
    assert ps.ok, [str(d) for d in ps.errors]
    # The converted workload's pod asks exactly what the seed's pod asked, through KGWE's annotations.
    wl = GPUWorkload.model_validate(doc)
    job = next(o for o in plan_children(wl, "agentaflow", "uid-1", Facts()) if o["kind"] == "Job")
    pod = job["spec"]["template"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert pod["metadata"]["annotations"]["kgwe.nvidia.io/min-memory-gb"] == "8.59"


def test_min_memory_rounds_up_so_no_smaller_gpu_passes():
    assert mib_to_gb(8192) == 8.59
    assert mib_to_gb(8192) * 1e9 / 2**20 >= 8192
    assert mib_to_gb(81559) * 1e9 / 2**20 >= 81559


@pytest.mark.parametrize(
    ("word", "kgwe"),
    [
        ("leastLoaded", "LeastLoaded"),
        ("least_utilized", "LeastLoaded"),
        ("best_fit", "BestFit"),
        ("costOptimized", "CostOptimized"),
        ("random", "Random"),
        ("round_robin", "RoundRobin"),
        ("bin-pack", "BinPack"),
        ("fastest", None),
    ],
)
def test_strategy_names(word, kgwe):
    assert strategy(word) == kgwe


def test_unknown_fields_are_reported_not_dropped():
    doc = yaml.safe_load((FIXTURES / "agentaflow-my-training-job.yaml").read_text())
    doc["spec"]["estimatedDuration"] = "2h"
    doc["spec"]["schedulingStrategy"] = "fastest"
    doc["status"] = {"phase": "Running"}
    conv = convert(doc)
    unmapped = dict(conv.unmapped)
    assert "spec.estimatedDuration" in unmapped
    assert "no KGWE strategy matches 'fastest'" in unmapped["spec.schedulingStrategy"]
    assert "status" in unmapped
    assert "schedulingStrategy" not in conv.manifest["spec"]


@pytest.mark.parametrize(
    "doc",
    [
        {"apiVersion": "kgwe.nvidia.io/v1", "kind": "GPUWorkload", "spec": {}},
        {"apiVersion": "agentaflow.io/v1", "kind": "GPUNode", "spec": {}},
        {"apiVersion": "agentaflow.io/v1", "kind": "GPUWorkload", "spec": "x"},
        ["not", "a", "mapping"],
    ],
)
def test_not_a_seed_manifest(doc):
    with pytest.raises(ConvertError):
        convert(doc)  # type: ignore[arg-type]


def test_cli_rejects_non_yaml(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [unclosed\n")
    assert main(["convert", str(bad)]) == 1
    assert "not YAML" in capsys.readouterr().err


def test_convert_says_what_the_result_still_needs_and_suggests_it(tmp_path, capsys):
    """GPU_Orchestrator's example validated clean before and was then refused on the cluster (no profile with
    its strategy, no PriorityClass "high"); convert now says so and writes what would fix it."""
    import shutil

    from kgwe.resources import sample_repo_dir

    out, suggest = tmp_path / "wl.yaml", tmp_path / "suggested"
    src = str(FIXTURES / "gpu-orchestrator-my-model.yaml")
    args = ["convert", src, "--runtime", "torch-distributed", "--policy", str(sample_repo_dir())]
    assert main([*args, "--out", str(out), "--suggest", str(suggest)]) == 0
    report = capsys.readouterr().err
    assert "STILL NEEDS: no ScoringProfile uses strategy LeastLoaded" in report
    assert 'may need: needs PriorityClass "high" on the cluster' in report
    assert "its pods get WorkloadRuntime 'torch-distributed'" in report
    doc = yaml.safe_load(out.read_text())
    assert doc["spec"]["runtime"] == "torch-distributed" and "podTemplate" not in doc["spec"]
    assert main(["validate", "--policy", str(sample_repo_dir()), str(out)]) == 1  # as the report said
    assert "[NoScoringProfile]" in capsys.readouterr().out
    # the suggested profile, added to the policy repository, makes the workload admissible there
    repo = tmp_path / "repo"
    shutil.copytree(sample_repo_dir(), repo)
    shutil.copy(suggest / "scoringprofile-least-loaded.yaml", repo / "scoring")
    assert main(["validate", "--policy", str(repo), str(out)]) == 0
    assert "[NoScoringProfile]" not in capsys.readouterr().out
    priority_class = yaml.safe_load((suggest / "priorityclass-high.yaml").read_text())
    assert (priority_class["kind"], priority_class["metadata"]["name"]) == ("PriorityClass", "high")
    assert isinstance(priority_class["value"], int)


def test_a_profile_the_policy_has_is_not_suggested(tmp_path, capsys):
    from kgwe.resources import sample_repo_dir

    doc = yaml.safe_load((FIXTURES / "agentaflow-my-training-job.yaml").read_text())
    doc["spec"]["schedulingStrategy"] = "best_fit"
    (tmp_path / "in.yaml").write_text(yaml.safe_dump(doc))
    suggest = tmp_path / "suggested"
    args = [
        "convert",
        str(tmp_path / "in.yaml"),
        "--policy",
        str(sample_repo_dir()),
        "--suggest",
        str(suggest),
    ]
    assert main(args) == 0
    assert "STILL NEEDS" not in capsys.readouterr().err
    assert list(suggest.iterdir()) == []  # BestFit is served and the priority is an integer
