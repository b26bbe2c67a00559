"""The shipped PodTemplateSpec schema is the one of the Kubernetes release the project builds against."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from kgwe.policy.pod_template import ROOT, compact_schema, kubernetes_version, schema, template_findings

REPO = Path(__file__).resolve().parents[2]


def test_schema_names_the_pinned_kubernetes_release():
    go_mod = (REPO / "hack" / "k8s" / "go.mod").read_text()
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", go_mod, re.M)
    assert pinned is not None
    assert kubernetes_version() == pinned.group(1), "run `make schemas` after changing hack/k8s"


def test_shipped_schema_equals_regeneration_from_the_pinned_module(tmp_path):
    out = tmp_path / "pod_template_spec.json"
    subprocess.run([str(REPO / "hack" / "pod-template-schema.sh"), str(out)], check=True, capture_output=True)
    shipped = REPO / "kgwe" / "policy" / "pod_template_spec.json"
    assert out.read_bytes() == shipped.read_bytes(), (
        "kgwe/policy/pod_template_spec.json is stale: make schemas"
    )


def test_compaction_keeps_what_checking_needs_and_drops_descriptions():
    openapi = {
        "components": {
            "schemas": {
                ROOT: {
                    "description": "long text",
                    "type": "object",
                    "properties": {
                        "spec": {"allOf": [{"$ref": "#/components/schemas/x.Spec"}], "default": {}}
                    },
                },
                "x.Spec": {"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}},
                "x.Unused": {"type": "string"},
            }
        }
    }
    doc = compact_schema(openapi, "v0", "src")
    assert doc["schemas"] == {
        ROOT: {"type": "object", "properties": {"spec": {"$ref": "x.Spec"}}},
        "x.Spec": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
    }


def test_a_complete_job_template_passes():
    template = {
        "metadata": {"labels": {"app": "train"}, "annotations": {"a": "b"}},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:25.12-py3",
                    "command": ["torchrun", "train.py"],
                    "env": [
                        {"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
                    ],
                    "ports": [{"containerPort": 29500, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": "8", "memory": "64Gi"}, "requests": {"cpu": 4.5}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"}},
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
            "affinity": None,  # null leaves a field unset, as the API server reads it
        },
    }
    assert template_findings(template) == []
    assert schema()["root"] == ROOT
