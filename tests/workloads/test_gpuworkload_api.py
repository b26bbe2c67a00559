"""GPUWorkload API: every seed example loads (or converts), and bad input gets a reason with a field path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kgwe.policy import GPUWorkload, load_repository
from kgwe.policy.gpu_workload import NodeOffer, problems

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = Path(__file__).parents[2] / "docs" / "examples" / "gpuworkloads"
KGWE_SEEDS = ("kgwe-readme-llm-training.yaml", "kgwe-prd-llm-training-job.yaml")

INVENTORY = """
apiVersion: kgwe.nvidia.io/v1
kind: GPUInventory
metadata: {name: lab}
spec:
  nodes:
    - {name: a100-1, gpus: 8, product: NVIDIA-A100-SXM4-80GB, topology: DGX-A100}
    - {name: h100-1, gpus: 8, product: NVIDIA-H100-80GB-HBM3, topology: DGX-H100}
"""


def _workload(spec: dict) -> dict:
    return {
        "apiVersion": "kgwe.nvidia.io/v1",
        "kind": "GPUWorkload",
        "metadata": {"name": "w", "namespace": "ml"},
        "spec": spec,
    }


@pytest.mark.parametrize("name", KGWE_SEEDS)
def test_kgwe_seed_examples_load_verbatim(name):
    wl = GPUWorkload.model_validate(yaml.safe_load((FIXTURES / name).read_text()))
    assert wl.spec.gpu_requirements.count == 8
    assert wl.spec.gpu_requirements.topology.preference == "NVLinkOptimal"
    assert wl.spec.gpu_requirements.topology.min_bandwidth_gbps == 600
    assert wl.spec.total_pods == 1


def test_prd_distributed_training_is_a_batch_kind():
    wl = GPUWorkload.model_validate(yaml.safe_load((FIXTURES / "kgwe-prd-llm-training-job.yaml").read_text()))
    assert wl.spec.workload_type == "DistributedTraining"
    assert wl.spec.is_batch


KGWE_EXAMPLES = [p for p in sorted(EXAMPLES.glob("*.yaml")) if "kgwe.nvidia.io/v1" in p.read_text()]


@pytest.mark.parametrize("path", KGWE_EXAMPLES, ids=lambda p: p.name)
def test_documented_kgwe_examples_validate(path):
    ps = load_repository(path)
    assert ps.ok, [str(d) for d in ps.errors]


def test_roles_and_gang_defaults():
    wl = GPUWorkload.model_validate(
        _workload(
            {
                "gpuRequirements": {"count": 8},
                "workloadType": "DistributedTraining",
                "roles": [
                    {"name": "launcher", "gpuRequirements": {"count": 1}},
                    {"name": "worker", "replicas": 3},
                ],
                "gang": {"backend": "Native"},
            }
        )
    )
    roles = wl.spec.effective_roles()
    assert [(r.name, r.replicas, r.gpu_requirements.count) for r in roles] == [
        ("launcher", 1, 1),
        ("worker", 3, 8),
    ]
    assert wl.spec.min_member == 4
    assert wl.spec.gang.timeout_seconds == 300
    assert wl.spec.retry_policy.max_retries == 3


def _errors(tmp_path, doc: dict, inventory: bool = False) -> list[str]:
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(doc))
    if inventory:
        (tmp_path / "inventory.yaml").write_text(INVENTORY)
    ps = load_repository(tmp_path)
    return [f"{d.path}: {d.message}" for d in ps.errors]


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        ({"gpuRequirements": {"count": 1}, "gpuRequirments": {}}, "spec.gpuRequirments", "unknown field"),
        ({"gpuRequirements": {"count": 1, "gpuMilli": 1001}}, "spec.gpuRequirements.gpuMilli", "1000"),
        (
            {"gpuRequirements": {"count": 1}, "podTemplate": {"spec": {"nodeName": "n1", "containers": []}}},
            "spec.podTemplate",
            "nodeName",
        ),
        (
            {
                "gpuRequirements": {"count": 1},
                "podTemplate": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"}}},
            },
            "spec.podTemplate",
            "kubernetes.io/hostname",
        ),
        (
            {
                "gpuRequirements": {"count": 1},
                "roles": [{"name": "w", "podTemplate": {"spec": {"nodeName": "n1"}}}],
            },
            "spec.roles[0].podTemplate",
            "nodeName",
        ),
        ({"gpuRequirements": {"count": 2, "gpuMilli": 500}}, "spec.gpuRequirements", "count must be 1"),
        ({"gpuRequirements": {"count": 1}, "gang": {"backend": "Volcano"}}, "spec.gang.backend", "Volcano"),
        (
            {
                "gpuRequirements": {"count": 1},
                "roles": [{"name": "w", "replicas": 2}],
                "gang": {"minMember": 3},
            },
            "spec",
            "minMember 3",
        ),
    ],
)
def test_bad_input_names_the_field(tmp_path, spec, path, words):
    errors = _errors(tmp_path, _workload(spec))
    assert any(e.startswith(path) and words in e for e in errors), errors


def test_impossible_requests_against_the_inventory(tmp_path):
    errors = _errors(tmp_path, _workload({"gpuRequirements": {"count": 9}}), inventory=True)
    assert any(e.startswith("spec.gpuRequirements.count") and "largest node has 8" in e for e in errors), (
        errors
    )
    errors = _errors(tmp_path, _workload({"gpuRequirements": {"count": 1, "migProfile": "1g.5gb"}}), True)
    assert any(e.startswith("spec.gpuRequirements.migProfile") and "1g.5gb" in e for e in errors), errors
    # A profile of a real GPU that no node of this inventory has: A100-40GB's 1g.5gb is known, 1g.12gb not.
    errors = _errors(
        tmp_path,
        _workload({"gpuRequirements": {"count": 1, "migProfile": "1g.10gb", "product": "L40S"}}),
        True,
    )
    assert any("no node offers product" in e for e in errors), errors
    assert _errors(tmp_path, _workload({"gpuRequirements": {"count": 8}}), inventory=True) == []


def test_problems_without_offers_say_nothing():
    wl = GPUWorkload.model_validate(_workload({"gpuRequirements": {"count": 64}}))
    assert problems(wl.spec, None) == []
    assert problems(wl.spec, [NodeOffer(gpus=8)])[0][0] == ("spec", "gpuRequirements", "count")


def test_crd_has_print_columns_and_status_subresource():
    crd = yaml.safe_load(
        (Path(__file__).parents[2] / "deploy/crds/gpuworkloads.kgwe.nvidia.io.yaml").read_text()
    )
    version = crd["spec"]["versions"][0]
    names = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert names == ["Phase", "GPUs", "Nodes", "Age"]
    assert version["subresources"] == {"status": {}}
