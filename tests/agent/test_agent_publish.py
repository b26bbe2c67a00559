"""The agent publishes on a real Node of the local control plane, and patches only on change."""

from __future__ import annotations

import argparse

import pytest
from kubernetes import client

from kgwe.agent import agent_cmd
from kgwe.cli import main
from kgwe.topology import annotation, known
from kgwe.vocab import AGENT_FIELD_MANAGER

pytestmark = pytest.mark.cluster


def _observe(name: str) -> agent_cmd.Observation:
    args = argparse.Namespace(fake_nvml=name, node_name=None, pod_resources_socket="")
    return agent_cmd.observe(args)


def test_publish_patches_once_then_only_on_change(k8s_api, gpu_node, control_plane, capsys):
    node = gpu_node("DGX-1-V100")
    core = client.CoreV1Api(k8s_api)
    first = agent_cmd.publish(core, node, _observe("DGX-1-V100"))
    assert first is not None and "labels" in first["metadata"]
    got = core.read_node(node).metadata
    assert got.labels["kgwe.nvidia.io/topology"] == "DGX-1-V100"
    assert got.labels["kgwe.nvidia.io/ring-gbps"] == "50"
    assert annotation.decode(got.annotations[annotation.ANNOTATION_KEY]) == known.load("DGX-1-V100")
    assert agent_cmd.publish(core, node, _observe("DGX-1-V100")) is None  # nothing changed: no patch

    # the same node now reports another topology (e.g. a board swap): the CLI path updates it
    rc = main(
        [
            "agent",
            "--once",
            "--fake-nvml",
            "L40S-8-PCIE",
            "--node-name",
            node,
            "--kubeconfig",
            str(control_plane.kubeconfig_path),
            "--pod-resources-socket",
            "",
        ]
    )
    assert rc == 0 and f"Node {node} updated" in capsys.readouterr().err
    got = core.read_node(node).metadata
    assert got.labels["kgwe.nvidia.io/topology"] == "L40S-8-PCIE"
    assert got.labels["kgwe.nvidia.io/nvlink"] == "false"
    assert annotation.decode(got.annotations[annotation.ANNOTATION_KEY]) == known.load("L40S-8-PCIE")
    assert got.labels["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-32GB"  # other labels untouched


def test_publish_to_a_missing_node_is_a_clear_error(k8s_api):
    with pytest.raises(Exception, match="cannot update Node no-such-node: 404"):
        agent_cmd.publish(client.CoreV1Api(k8s_api), "no-such-node", _observe("HGX-H100"))


def test_no_nvml_on_a_node_says_so_on_the_node_with_what_to_check(k8s_api, gpu_node, control_plane):
    """This machine has no NVIDIA library: the real nvidia-ml-py cannot load it. The agent says so where a
    person looks (the GPUHealthy condition, a Warning Event, hence `kgwe health`) and exits 3 (--once)."""
    import subprocess
    import sys

    from kgwe.cluster.client import list_items
    from kgwe.fleet.nodes import health_rows

    node = gpu_node("DGX-H100")
    core = client.CoreV1Api(k8s_api)
    argv = ["agent", "--once", "--node-name", node, "--kubeconfig", str(control_plane.kubeconfig_path)]
    done = subprocess.run(
        [sys.executable, "-m", "kgwe.cli", *argv, "--pod-resources-socket", ""],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "no NVIDIA driver" in done.stderr and "Traceback" not in done.stderr
    condition = next(c for c in core.read_node(node).status.conditions if c.type == "GPUHealthy")
    assert (condition.status, condition.reason) == ("Unknown", "NVMLUnavailable")
    assert "libnvidia-ml.so.1" in condition.message and "agent.runtimeClassName" in condition.message
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    mine = [(e.type, e.reason) for e in events if e.source and e.source.component == AGENT_FIELD_MANAGER]
    assert mine == [("Warning", "NVMLUnavailable")]  # (the node controller's RegisteredNode beside it)
    raw = list_items(core.list_node, field_selector=f"metadata.name={node}")
    [row] = health_rows(raw, every_gpu=True)
    assert (row["status"], row["reason"]) == ("Unknown", "NVMLUnavailable")
