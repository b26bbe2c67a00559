"""The agent publishes on a real Node of the local control plane, and patches only on change."""

from __future__ import annotations

import argparse

import pytest
from kubernetes import client

from kgwe.agent import agent_cmd
from kgwe.cli import main
from kgwe.topology import annotation, known

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
