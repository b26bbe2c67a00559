"""Simulated GPU node manifests carry what GFD / the device plugin / the KGWE agent publish on real nodes."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from kgwe.errors import KgweError
from kgwe.localcluster import gpunodes
from kgwe.topology import annotation, known


@pytest.mark.parametrize("key", sorted(gpunodes.MACHINES))
def test_manifest_has_gfd_labels_resources_and_topology(key: str) -> None:
    m = gpunodes.machine(key)
    node = gpunodes.node_manifest("gpu-1", m)
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == m.product
    assert labels["nvidia.com/gpu.count"] == "8"
    assert int(labels["nvidia.com/gpu.memory"]) == m.gpu_model.memory_mib
    assert labels["nvidia.com/mig.capable"] == ("true" if m.gpu_model.mig_capable else "false")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert node["status"]["capacity"] == node["status"]["allocatable"]
    assert node["metadata"]["annotations"][gpunodes.KWOK_ANNOTATION] == "fake"
    topo = annotation.decode(node["metadata"]["annotations"][annotation.ANNOTATION_KEY])
    assert len(topo.gpus) == 8
    assert annotation.encode(topo) == annotation.encode(known.load(m.topology))


def test_mig_capable_nodes_start_all_disabled_and_managed() -> None:
    labels = gpunodes.node_manifest("h", gpunodes.machine("DGX-H100"))["metadata"]["labels"]
    assert labels[gpunodes.MIG_CONFIG_LABEL] == "all-disabled"
    assert labels[gpunodes.MIG_STATE_LABEL] == "success"
    assert labels[gpunodes.MIG_MANAGER_DEPLOY_LABEL] == "true"
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    l40s = gpunodes.node_manifest("l", gpunodes.machine("L40S-8-PCIE"))["metadata"]["labels"]
    assert gpunodes.MIG_CONFIG_LABEL not in l40s
    # GFD writes the config's MIG strategy on every GPU node, MIG-capable or not (test_gfd_label_drift.py)
    assert l40s["nvidia.com/mig.strategy"] == "mixed"


def test_mig_layout_becomes_mixed_strategy_resources() -> None:
    layout = [None] * 6 + [("3g.40gb", "3g.40gb"), ("1g.10gb+me",)]
    node = gpunodes.node_manifest("h", gpunodes.machine("DGX-H100"), mig_layout=layout, mig_config="c1")
    alloc = node["status"]["allocatable"]
    assert alloc["nvidia.com/gpu"] == "6"
    assert alloc["nvidia.com/mig-3g.40gb"] == "2"
    assert alloc["nvidia.com/mig-1g.10gb.me"] == "1"
    assert node["metadata"]["labels"][gpunodes.MIG_CONFIG_LABEL] == "c1"


def test_single_strategy_counts_mig_devices_as_gpus() -> None:
    layout = [("1g.10gb",) * 7] * 8
    assert gpunodes.gpu_resources(8, layout, "single") == {"nvidia.com/gpu": 56}


def test_bad_layouts_are_clear_errors() -> None:
    with pytest.raises(KgweError, match="not MIG capable"):
        gpunodes.node_manifest("l", gpunodes.machine("L40S-8-PCIE"), mig_layout=[None] * 8)
    with pytest.raises(KgweError, match="lists 2 GPUs"):
        gpunodes.gpu_resources(8, [None, None])
    with pytest.raises(KgweError, match="unknown GPU machine"):
        gpunodes.machine("DGX-9000")


@pytest.mark.cluster
def test_every_machine_becomes_a_ready_gpu_node_that_keeps_its_resources(
    k8s_api: client.ApiClient, gpu_node: Any
) -> None:
    core = client.CoreV1Api(k8s_api)
    for key in sorted(gpunodes.MACHINES):
        name = gpu_node(key)
        node = core.read_node(name)
        assert gpunodes.is_schedulable_ready(node)
        assert node.status.allocatable["nvidia.com/gpu"] == "8"  # kwok's status update kept it
        assert node.status.node_info.kubelet_version.startswith("kwok-")
        assert node.metadata.labels["nvidia.com/gpu.product"] == gpunodes.machine(key).product
        topo = annotation.decode(node.metadata.annotations[annotation.ANNOTATION_KEY])
        assert topo.name == known.load(gpunodes.machine(key).topology).name
