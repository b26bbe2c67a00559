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


def test_gpu_orchestrator_without_image_keeps_the_container_its_controller_ran(capsys):
    """The seed had no pod template: its controller ran python:3.11-slim with MODEL_NAME and GPU_COUNT. The
    plain `kgwe convert FILE` keeps that container, says so, and says how to run another."""
    assert main(["convert", str(FIXTURES / "gpu-orchestrator-my-model.yaml")]) == 0
    captured = capsys.readouterr()
    doc = yaml.safe_load(captured.out)
    (container,) = doc["spec"]["podTemplate"]["spec"]["containers"]
    assert (container["name"], container["image"]) == ("gpu-workload", "python:3.11-slim")
    env = [{"name": "MODEL_NAME", "value": "llama2"}, {"name": "GPU_COUNT", "value": "2"}]
    assert container["env"] == env
    assert "WARNING spec.podTemplate: the source has none" in captured.err and "--image" in captured.err


def test_agentaflow_without_a_template_is_a_clear_error(capsys):
    doc = yaml.safe_load((FIXTURES / "agentaflow-my-training-job.yaml").read_text())
    del doc["spec"]["podTemplate"]
    with pytest.raises(ConvertError, match="pass --image"):
        convert(doc)


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "docs" / "examples" / "gpuworkloads").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_founding_examples_run_as_kgwe_suggests(example, tmp_path, capsys, monkeypatch):
    """Every GPUWorkload of the founding documents, as written: a seed's is refused with the command that
    converts it, that very command works, and the result (or a KGWE one as it is) validates and dry-runs
    against sample-repo. No message says a bare None."""
    import re
    import shlex
    import shutil

    from kgwe.resources import sample_repo_dir

    policy = str(sample_repo_dir())
    shutil.copy(example, tmp_path / example.name)
    monkeypatch.chdir(tmp_path)
    said: list[str] = []
    code = main(["validate", "--policy", policy, example.name])
    out = capsys.readouterr()
    said += [out.out, out.err]
    suggested = re.search(r"convert it with `(kgwe convert [^`]+)`", out.out)
    manifest = example.name
    if suggested:
        assert code == 1
        argv = shlex.split(suggested.group(1))
        assert main(argv[1:]) == 0, argv
        out = capsys.readouterr()
        said.append(out.err)
        manifest = "converted.yaml"
        (tmp_path / manifest).write_text(out.out)
    assert main(["validate", "--policy", policy, manifest]) == 0
    out = capsys.readouterr()
    said += [out.out, out.err]
    assert main(["submit", "--dry-run=client", "-o", "yaml", "--policy", policy, manifest]) == 0
    out = capsys.readouterr()
    said.append(out.err)
    assert any(d["kind"] in ("Job", "Deployment") for d in yaml.safe_load_all(out.out))
    assert not [line for text in said for line in text.splitlines() if re.search(r"\bNone\b", line)]


@pytest.mark.parametrize(
    ("source", "word", "says"),
    [
        ("agentaflow-my-training-job.yaml", "priority", "KGWE's Priority orders nodes"),
        ("agentaflow-my-training-job.yaml", "least_utilized", "allocation, not measured utilization"),
        ("agentaflow-my-training-job.yaml", "best_fit", "memory only filters"),
        ("gpu-orchestrator-my-model.yaml", "costOptimized", "reads no label"),
        ("gpu-orchestrator-my-model.yaml", "leastLoaded", "most allocatable GPUs"),
    ],
)
def test_a_seed_word_that_places_differently_is_warned_about(source, word, says):
    doc = yaml.safe_load((FIXTURES / source).read_text())
    doc["spec"]["schedulingStrategy"] = word
    conv = convert(doc, image="busybox:1.36")
    warnings = dict(conv.warnings)
    assert says in warnings["spec.schedulingStrategy"]
    assert any("WARNING spec.schedulingStrategy" in line for line in conv.report_lines())


def test_a_seed_word_kgwe_means_alike_is_not_warned_about():
    doc = yaml.safe_load((FIXTURES / "gpu-orchestrator-my-model.yaml").read_text())
    doc["spec"]["schedulingStrategy"] = "random"
    assert convert(doc, image="busybox:1.36").warnings == []
    del doc["spec"]["schedulingStrategy"]  # GPU_Orchestrator's default was leastLoaded: said
    (warning,) = convert(doc, image="busybox:1.36").warnings
    assert warning[0] == "spec.schedulingStrategy" and "leastLoaded" in warning[1]


def test_strategy_command_warns_for_a_seed_word(tmp_path, capsys):
    import shutil

    from kgwe.resources import sample_repo_dir

    repo = tmp_path / "repo"
    shutil.copytree(sample_repo_dir(), repo)
    assert main(["strategy", "priority", "--repo", str(repo), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert '"priority" is Priority' in err and "warning: AgentaFlow's priority ordered the waiting" in err


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
    its strategy, no PriorityClass "high"); convert now says so and writes what would fix it. (sample-repo
    serves LeastLoaded: a copy without that profile stands for a repository that does not.)"""
    import shutil

    from kgwe.resources import sample_repo_dir

    bare = tmp_path / "bare"
    shutil.copytree(sample_repo_dir(), bare)
    (bare / "scoring" / "least-loaded.yaml").unlink()
    out, suggest = tmp_path / "wl.yaml", tmp_path / "suggested"
    src = str(FIXTURES / "gpu-orchestrator-my-model.yaml")
    args = ["convert", src, "--runtime", "torch-distributed", "--policy", str(bare)]
    assert main([*args, "--out", str(out), "--suggest", str(suggest)]) == 0
    report = capsys.readouterr().err
    assert "STILL NEEDS: no ScoringProfile uses strategy LeastLoaded" in report
    assert 'may need: needs PriorityClass "high" on the cluster' in report
    assert "its pods get WorkloadRuntime 'torch-distributed'" in report
    doc = yaml.safe_load(out.read_text())
    assert doc["spec"]["runtime"] == "torch-distributed" and "podTemplate" not in doc["spec"]
    assert main(["validate", "--policy", str(bare), str(out)]) == 1  # as the report said
    assert "[NoScoringProfile]" in capsys.readouterr().out
    # the suggested profile, added to the policy repository, makes the workload admissible there
    shutil.copy(suggest / "scoringprofile-least-loaded.yaml", bare / "scoring")
    assert main(["validate", "--policy", str(bare), str(out)]) == 0
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
