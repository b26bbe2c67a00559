"""WorkloadRuntimes: a GPUWorkload without a pod template gets one by framework and workload type, a
workload with its own keeps it, and every way that can go wrong is a clear error at validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kgwe.policy import GPUWorkload, load_repository
from kgwe.policy.admission import ClusterView, PolicyView, findings, resolve_facts
from kgwe.render.render import render
from kgwe.resources import sample_repo_dir
from kgwe.workloads.plan import plan_children

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples" / "gpuworkloads"


def _doc(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def _sample_policy() -> PolicyView:
    ps = load_repository(sample_repo_dir())
    return PolicyView(
        profiles={p.name: p.spec.strategy for p in ps.scoring_profiles},
        runtimes={r.name: r.spec for r in ps.runtimes},
    )


def _plan(doc: dict, policy: PolicyView, native: bool = True) -> tuple[dict, dict]:
    wl = GPUWorkload.model_validate(doc)
    facts = resolve_facts(wl, 0, policy, ClusterView(priority_classes={}), native=native, kueue=False)
    objs = {f"{o['kind']}/{o['metadata']['name']}": o for o in plan_children(wl, "ml", "uid-1", facts)}
    return {"runtime": facts.runtime_name}, objs


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def test_the_prd_example_gets_the_pytorch_runtime_as_written():
    doc = _doc("kgwe-prd-llm-training-job.yaml")
    assert "podTemplate" not in doc["spec"]
    chosen, objs = _plan(doc, _sample_policy())
    assert chosen == {"runtime": "torch-distributed"}
    pod = objs["Job/llm-training-job-r0-worker"]["spec"]["template"]
    (trainer,) = pod["spec"]["containers"]
    assert trainer["image"] == "nvcr.io/nvidia/pytorch:25.12-py3"
    assert trainer["command"] == ["torchrun", "$(TRAIN_SCRIPT)"]
    assert trainer["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    env = _env(trainer)
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("1", "8", "8")
    assert env["TRAIN_SCRIPT"] == "/workspace/train.py"  # the runtime's own env is kept after KGWE's
    assert pod["spec"]["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"
    assert objs["Service/llm-training-job"]["spec"]["ports"][0]["port"] == 29500
    assert not findings(GPUWorkload.model_validate(doc), "ml", _sample_policy(), ClusterView())


def test_a_workload_with_its_own_template_keeps_it():
    chosen, objs = _plan(_doc("kgwe-readme-llm-training.yaml"), _sample_policy())
    assert chosen == {"runtime": None}
    (container,) = objs["Job/llm-training-r0-worker"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "nvcr.io/nvidia/pytorch:24.01-py3"
    assert "volumes" not in objs["Job/llm-training-r0-worker"]["spec"]["template"]["spec"]


def test_the_workloads_partial_template_is_laid_over_the_runtimes():
    doc = _doc("kgwe-prd-llm-training-job.yaml")
    doc["spec"]["podTemplate"] = {
        "metadata": {"labels": {"team": "nlp"}},
        "spec": {"nodeSelector": {"pool": "a100"}, "volumes": [{"name": "data", "emptyDir": {}}]},
    }
    _, objs = _plan(doc, _sample_policy())
    pod = objs["Job/llm-training-job-r0-worker"]["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "nlp"  # maps merge
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"
    assert pod["spec"]["nodeSelector"] == {"pool": "a100"}
    assert pod["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]  # lists replace
    assert pod["spec"]["containers"][0]["name"] == "trainer"


def test_inference_gets_triton_and_a_named_runtime_wins():
    doc = _doc("inference-mig.yaml")
    del doc["spec"]["podTemplate"]
    chosen, objs = _plan(doc, _sample_policy())
    assert chosen == {"runtime": "triton-server"}
    dep = objs["Deployment/chat-small-server"]["spec"]["template"]["spec"]
    assert dep["containers"][0]["image"] == "nvcr.io/nvidia/tritonserver:25.11-py3"
    assert dep["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    jax = _doc("kgwe-prd-llm-training-job.yaml")
    jax["spec"]["runtime"] = "jax-distributed"
    jax["spec"]["distributedConfig"] = {"nodes": 2}
    chosen, objs = _plan(jax, _sample_policy())
    assert chosen == {"runtime": "jax-distributed"}
    env = _env(objs["Job/llm-training-job-r0-worker"]["spec"]["template"]["spec"]["containers"][0])
    assert env["JAX_COORDINATOR_ADDRESS"] == "llm-training-job-r0-worker-0.llm-training-job:1234"
    assert env["JAX_NUM_PROCESSES"] == "2"
    assert env["JAX_PROCESS_ID"] == {
        "fieldRef": {
            "apiVersion": "v1",
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
        }
    }
    assert "PET_NNODES" not in env  # the runtime's launcher, not the workload's framework word
    assert objs["Service/llm-training-job"]["spec"]["ports"][0]["port"] == 1234


def _write(tmp_path: Path, name: str, doc: dict) -> None:
    (tmp_path / name).write_text(yaml.safe_dump(doc, sort_keys=False))


def test_no_runtime_and_no_template_is_one_error_naming_the_runtimes(tmp_path, capsys):
    from kgwe.cli import main

    doc = _doc("kgwe-prd-llm-training-job.yaml")
    doc["spec"]["framework"] = "TensorFlow"
    _write(tmp_path, "wl.yaml", doc)
    assert main(["validate", "--policy", str(sample_repo_dir()), str(tmp_path / "wl.yaml")]) == 1
    out = capsys.readouterr().out.splitlines()
    errors = [line for line in out if ": error: " in line]
    assert len(errors) == 1, out
    line = (tmp_path / "wl.yaml").read_text().splitlines().index("  framework: TensorFlow") + 1
    assert errors[0].startswith(f"wl.yaml:{line}:3: error: GPUWorkload/llm-training-job spec.framework:")
    assert "no WorkloadRuntime serves framework TensorFlow for workloadType DistributedTraining" in errors[0]
    assert (
        "available: jax-distributed (JAX: Training/DistributedTraining), torch-distributed (PyTorch: "
        "Training/DistributedTraining/Batch), triton-server (Triton: Inference)" in errors[0]
    )
    assert errors[0].endswith("[NoRuntime]")
    doc["spec"]["runtime"] = "torch-ddp"
    _write(tmp_path, "wl.yaml", doc)
    assert main(["validate", "--policy", str(sample_repo_dir()), str(tmp_path / "wl.yaml")]) == 1
    assert (
        'spec.runtime: no WorkloadRuntime "torch-ddp" (available: jax-distributed' in capsys.readouterr().out
    )


def test_runtime_named_while_every_role_has_containers_is_an_error(tmp_path):
    doc = _doc("kgwe-readme-llm-training.yaml")
    doc["spec"]["runtime"] = "torch-distributed"
    _write(tmp_path, "wl.yaml", doc)
    (error,) = load_repository(tmp_path).errors
    assert "every role brings its own containers, so no role would use it" in error.message


RUNTIME = {
    "apiVersion": "kgwe.nvidia.io/v1",
    "kind": "WorkloadRuntime",
    "metadata": {"name": "torch-a"},
    "spec": {
        "framework": "PyTorch",
        "workloadTypes": ["Training"],
        "launcher": "Torchrun",
        "template": {"spec": {"containers": [{"name": "t", "image": "i"}]}},
    },
}


def test_repository_rules_for_runtimes(tmp_path):
    _write(tmp_path, "a.yaml", RUNTIME)
    other = yaml.safe_load(yaml.safe_dump(RUNTIME))
    other["metadata"]["name"] = "torch-b"
    other["spec"]["framework"] = "pytorch"  # the same framework, another spelling
    other["spec"]["workloadTypes"] = ["Batch", "Training"]
    _write(tmp_path, "b.yaml", other)
    serving = yaml.safe_load(yaml.safe_dump(RUNTIME))
    serving["metadata"]["name"] = "serve"
    serving["spec"]["workloadTypes"] = ["Inference"]
    serving["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    _write(tmp_path, "c.yaml", serving)
    ps = load_repository(tmp_path)
    found = {(d.file, d.path, d.severity): d.message for d in ps.diagnostics}
    assert (
        'already served by WorkloadRuntime "torch-a" (a.yaml:1)'
        in found[("b.yaml", "spec.workloadTypes[1]", "error")]
    )
    assert "Inference pods are served by a Deployment" in found[("c.yaml", "spec.launcher", "error")]
    key = ("c.yaml", "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu", "warning")
    assert "come from each workload's gpuRequirements" in found[key]
    assert len(ps.errors) == 2, [str(d) for d in ps.errors]


def test_render_writes_the_runtimes_for_the_controller():
    ps = load_repository(sample_repo_dir())
    rendered = render(ps)
    (cm,) = [o for o in rendered.objects if o["metadata"]["name"] == "kgwe-runtimes"]
    doc = yaml.safe_load(cm["data"]["runtimes.json"])
    assert sorted(doc["runtimes"]) == ["jax-distributed", "torch-distributed", "triton-server"]
    assert doc["runtimes"]["torch-distributed"]["workloadTypes"] == [
        "Training",
        "DistributedTraining",
        "Batch",
    ]


def test_without_policy_the_template_less_workload_is_a_warning_only(tmp_path):
    _write(tmp_path, "wl.yaml", _doc("kgwe-prd-llm-training-job.yaml"))
    ps = load_repository(tmp_path)
    assert ps.ok
    (warning,) = ps.warnings
    assert "--policy DIR checks one exists" in warning.message


@pytest.mark.parametrize("framework", ["PyTorch", "pytorch", " PYTORCH "])
def test_framework_matching_ignores_case(framework):
    doc = _doc("kgwe-prd-llm-training-job.yaml")
    doc["spec"]["framework"] = framework
    chosen, _ = _plan(doc, _sample_policy())
    assert chosen == {"runtime": "torch-distributed"}


def test_submit_client_dry_run_prints_the_planned_objects(tmp_path, capsys):
    from kgwe.cli import main

    doc = _doc("kgwe-prd-llm-training-job.yaml")
    doc["spec"]["distributedConfig"] = {"nodes": 2}
    doc["spec"]["priority"] = 100
    _write(tmp_path, "wl.yaml", doc)
    args = ["submit", "--dry-run=client", "-o", "yaml", "--policy", str(sample_repo_dir()), "-n", "ml"]
    assert main([*args, str(tmp_path / "wl.yaml")]) == 0
    captured = capsys.readouterr()
    objs = [o for o in yaml.safe_load_all(captured.out)]
    assert [f"{o['kind']}/{o['metadata']['name']}" for o in objs] == [
        "PodGroup/llm-training-job-r0",
        "Service/llm-training-job",
        "Job/llm-training-job-r0-worker",
    ]
    assert {o["metadata"]["namespace"] for o in objs} == {"ml"}
    pod = objs[2]["spec"]["template"]
    assert pod["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/pytorch:25.12-py3"
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "llm-training-job-r0"}
    assert "gang Native (Auto: assumed native PodGroups)" in captured.err
    assert "priority 100: the cluster's PriorityClass at or below it, left out here" in captured.err
    assert "runtime torch-distributed" in captured.err
    # without the repository the template cannot be known: said, nothing printed
    assert main(["submit", "--dry-run=client", "-o", "yaml", str(tmp_path / "wl.yaml")]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "pass --policy DIR" in captured.err
    assert main(["submit", "-o", "yaml", str(tmp_path / "wl.yaml")]) == 1
    assert "use it with --dry-run=client" in capsys.readouterr().err


def test_submit_refuses_what_the_policy_refuses(tmp_path, capsys):
    from kgwe.cli import main

    doc = _doc("kgwe-readme-llm-training.yaml")
    doc["spec"]["schedulingStrategy"] = "Spread"
    _write(tmp_path, "wl.yaml", doc)
    args = ["submit", "--dry-run=client", "--policy", str(sample_repo_dir()), str(tmp_path / "wl.yaml")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "no ScoringProfile uses strategy Spread" in err and "nothing submitted" in err
