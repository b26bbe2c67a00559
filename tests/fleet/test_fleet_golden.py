"""Golden output of every fleet command's table and JSON, from fixed objects (pure: no cluster).

The inputs are what the API returns: simulated GPU Operator nodes (kgwe.localcluster.gpunodes.node_manifest)
with the agent's health annotation, GPUWorkloads and a PolicyRepository with the status their controllers
write.
A change of format shows up as a diff against tests/fleet/golden/; regenerate deliberately with
KGWE_UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kgwe.fleet import output
from kgwe.fleet.nodes import HEALTH_COLUMNS, NODE_COLUMNS, gpu_topology_text, health_rows, node_rows
from kgwe.fleet.status import status_document, status_text
from kgwe.fleet.watch_view import frame
from kgwe.fleet.workloads import WORKLOAD_COLUMNS, workload_rows
from kgwe.localcluster.gpunodes import machine, node_manifest
from kgwe.topology import health

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 23, 22, 30, tzinfo=UTC)
SINCE = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("KGWE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file (KGWE_UPDATE_GOLDEN=1 rewrites it)"


def nodes() -> list[dict]:
    h100 = node_manifest(
        "dgx-h100-01",
        machine("DGX-H100"),
        mig_layout=[["1g.10gb"] * 7, ["3g.40gb", "3g.40gb"]] + [None] * 6,
        mig_config="kgwe-a1b2c3",
    )
    a100 = node_manifest("dgx-a100-01", machine("DGX-A100"))
    l40s = node_manifest("l40s-01", machine("L40S-8-PCIE"))
    l40s["status"]["allocatable"]["nvidia.com/gpu.shared"] = "32"
    h100["metadata"]["annotations"][health.ANNOTATION_KEY] = health.encode({})
    a100["metadata"]["annotations"][health.ANNOTATION_KEY] = health.encode(
        {
            3: health.GPUFault("XID79", "GPU has fallen off the bus", SINCE),
            6: health.GPUFault("VolatileECC", "3 volatile uncorrectable ECC errors", SINCE),
        }
    )
    a100["status"]["conditions"] = [
        {
            "type": "GPUHealthy",
            "status": "False",
            "reason": "GPUUnhealthy",
            "message": "2 of 8 GPUs unhealthy",
        }
    ]
    return [l40s, h100, a100]  # unsorted on purpose


REQUESTS = {
    "dgx-a100-01": {"nvidia.com/gpu": 5},
    "dgx-h100-01": {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-3g.40gb": 1},
    "l40s-01": {"nvidia.com/gpu.shared": 30},
}
PODS = {
    "dgx-a100-01": ["ml/train-0", "ml/train-1"],
    "dgx-h100-01": ["serve/chat-0", "serve/chat-1", "serve/chat-2"],
    "l40s-01": ["nb/jupyter-0"],
}


def workloads() -> list[dict]:
    return [
        {
            "metadata": {
                "name": "llm-pretrain",
                "namespace": "ml-team",
                "creationTimestamp": "2026-11-21T10:00:00Z",
            },
            "spec": {
                "gpuRequirements": {"count": 8},
                "workloadType": "DistributedTraining",
                "distributedConfig": {"nodes": 2},
                "team": "ml-research",
            },
            "status": {
                "phase": "Running",
                "gpus": 16,
                "nodes": "dgx-a100-01,dgx-a100-02",
                "gangBackend": "Native",
                "retryCount": 1,
                "cost": {
                    "gpuHours": "812.500",
                    "amount": "1787.50",
                    "currency": "USD",
                    "asOf": "2026-11-23T22:29:00Z",
                },
                "conditions": [
                    {"type": "PodsReady", "status": "True", "reason": "AllReady", "message": "2/2"}
                ],
                "placements": [{"pod": "llm-pretrain-r0-worker-0-x", "node": "dgx-a100-01", "gpus": [0, 1]}],
            },
        },
        {
            "metadata": {"name": "chat", "namespace": "serve", "creationTimestamp": "2026-11-23T22:29:18Z"},
            "spec": {
                "gpuRequirements": {"count": 1, "migProfile": "1g.10gb"},
                "workloadType": "Inference",
                "roles": [{"name": "server", "replicas": 3}],
            },
        },
    ]


def _budget_event(said: str, at: str) -> dict:
    """A budget alert as the controller's EventRecorder writes it about PolicyRepository gpu-policy."""
    return {
        "reason": "BudgetThreshold",
        "metadata": {"namespace": "kgwe-system"},
        "involvedObject": {
            "kind": "PolicyRepository",
            "namespace": "kgwe-system",
            "name": "gpu-policy",
            "uid": "repo-uid",
        },
        "source": {"component": "kgwe-controller"},
        "message": f"budget ml-research (ml-research) {said}",
        "lastTimestamp": at,
    }


def status_inputs() -> tuple:
    repositories = [
        {
            "metadata": {"name": "gpu-policy", "namespace": "kgwe-system", "uid": "repo-uid"},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "Unknown",
                        "reason": "Progressing",
                        "message": "pool inference-h100: 3/8 done",
                    }
                ],
                "lastAppliedRevision": "main@sha1:0123456789abcdef0123456789abcdef01234567",
                "rollout": {
                    "inference-h100": {"pool": "inference-h100", "total": 8, "done": 3, "stopped": False},
                    "training-a100": {"pool": "training-a100", "total": 10, "done": 10, "stopped": False},
                },
            },
        }
    ]
    components = [
        {
            "kind": "Deployment",
            "metadata": {
                "name": "kgwe-controller",
                "namespace": "kgwe-system",
                "labels": {"app.kubernetes.io/component": "controller"},
            },
            "spec": {"replicas": 2},
            "status": {"readyReplicas": 2},
        },
        {
            "kind": "DaemonSet",
            "metadata": {"name": "kgwe-agent", "namespace": "kgwe-system"},
            "status": {"desiredNumberScheduled": 3, "numberReady": 2},
        },
    ]
    events = [
        _budget_event("reached 80% of 20000 USD in 2026-11: spent 16120.00", "2026-11-20T06:00:00Z"),
        _budget_event("reached 90% of 20000 USD in 2026-11: spent 18050.00", "2026-11-23T06:00:00Z"),
        {"reason": "ReconciliationSucceeded", "involvedObject": {"name": "gpu-policy"}, "message": "applied"},
    ]
    quotas = [
        {
            "metadata": {
                "name": "kgwe-budget",
                "namespace": "ds-notebooks",
                "annotations": {"kgwe.nvidia.io/budget": "data-science"},
            },
            "spec": {"hard": {"requests.nvidia.com/gpu": "10", "requests.nvidia.com/gpu.shared": "40"}},
            "status": {"used": {"requests.nvidia.com/gpu": "8", "requests.nvidia.com/gpu.shared": "31"}},
        }
    ]
    return repositories, components, node_rows(nodes(), REQUESTS, PODS), events, quotas


def test_nodes_table_wide_json():
    rows = node_rows(nodes(), REQUESTS, PODS)
    golden("nodes.txt", output.render(rows, NODE_COLUMNS, "table"))
    golden("nodes-wide.txt", output.render(rows, NODE_COLUMNS, "wide"))
    golden("nodes.json", output.render(rows, NODE_COLUMNS, "json", kind="GPUNodeList"))
    # `kgwe nodes NODE -o wide`: below the table, each named node's GPUs and links
    golden("nodes-topology.txt", "".join(gpu_topology_text(n) for n in nodes()))


def test_health_table_json():
    golden("health.txt", output.render(health_rows(nodes(), every_gpu=False), HEALTH_COLUMNS, "wide"))
    one = [n for n in nodes() if n["metadata"]["name"] == "dgx-a100-01"]
    golden("health-node.txt", output.render(health_rows(one, every_gpu=True), HEALTH_COLUMNS, "table"))
    golden("health.json", output.to_json({"items": health_rows(nodes(), every_gpu=False)}))


def test_workloads_table_json():
    rows = workload_rows(workloads(), NOW)
    golden("workloads.txt", output.render(rows, WORKLOAD_COLUMNS, "table"))
    golden("workloads-wide.txt", output.render(rows, WORKLOAD_COLUMNS, "wide"))
    golden("workloads.json", output.render(rows, WORKLOAD_COLUMNS, "json", kind="GPUWorkloadList"))


def test_status_text_json():
    doc = status_document(*status_inputs())
    golden("status.txt", status_text(doc))
    golden("status.json", output.to_json(doc))


def test_status_with_nothing_installed_says_so():
    golden("status-empty.txt", status_text(status_document([], [], [], [], [])))


def test_watch_frame():
    golden("watch.txt", frame(nodes(), REQUESTS, PODS, workloads(), NOW, scope="all namespaces"))


def test_yaml_is_the_json_document():
    import json

    import yaml

    rows = node_rows(nodes(), REQUESTS, PODS)
    as_yaml = yaml.safe_load(output.render(rows, NODE_COLUMNS, "yaml"))
    assert as_yaml == json.loads(output.render(rows, NODE_COLUMNS, "json"))


def test_template_training_and_strategy_diff(tmp_path):
    kgwe = [sys.executable, "-m", "kgwe.cli"]
    out = subprocess.run([*kgwe, "template"], capture_output=True, text=True, check=True, cwd=ROOT)
    golden("template-training.yaml", out.stdout)
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "sample-repo", repo)
    out = subprocess.run(
        [*kgwe, "strategy", "Spread", "--repo", str(repo)], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    golden("strategy.diff", out.stdout)


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0, "0s"), (59, "59s"), (60, "1m"), (7199, "119m"), (7200, "2h"), (172800, "2d")]
)
def test_age_reads_like_kubectl(seconds, shown):
    from datetime import timedelta

    assert output.age(NOW - timedelta(seconds=seconds), NOW) == shown
    assert output.age(None, NOW) is None
