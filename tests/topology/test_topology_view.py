"""A node's GPUs and links as people read them, from the agent's annotation (kgwe.topology.view), and the
fleet dashboard's topology samples from the same."""

from __future__ import annotations

import pytest

from kgwe.errors import KgweError
from kgwe.localcluster.gpunodes import machine, node_manifest
from kgwe.observability.topology import topology_samples
from kgwe.topology import annotation, view
from kgwe.topology.known import load
from kgwe.vocab import TOPOLOGY_ANNOTATION


def test_every_pair_once_with_its_topo_m_label_and_bandwidth():
    topo = load("DGX-1-V100")
    v = view.view(topo)
    assert len(v.links) == 28 and all(link.gpu_a < link.gpu_b for link in v.links)
    by_pair = {(link.gpu_a, link.gpu_b): link for link in v.links}
    # DGX-1: GPU0-GPU3 two NVLinks (2 x 25 GB/s), GPU0-GPU5 no NVLink: across the CPUs
    assert (by_pair[(0, 3)].label, by_pair[(0, 3)].via, by_pair[(0, 3)].gbps) == ("NV2", "nvlink", 50)
    assert (by_pair[(0, 5)].label, by_pair[(0, 5)].via) == ("SYS", "pcie")
    assert v.matrix == topo.matrix() and v.matrix[0][3] == "NV2"
    assert [g.numa_node for g in v.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    text = view.text("dgx1", v)
    assert text.splitlines()[0] == "dgx1: DGX-1-V100, 8 GPUs"
    assert text.splitlines()[-1] == "GB/s per direction (estimated): NV1 25, NV2 50, SYS 6"


def test_annotation_round_trip_and_bad_annotations():
    topo = load("DGX-H100")
    assert view.from_annotation(annotation.encode(topo)) == view.view(topo)
    assert view.from_annotation(None) is None
    with pytest.raises(KgweError, match="not valid JSON"):
        view.from_annotation("{")
    with pytest.raises(KgweError, match="over"):
        view.from_annotation("x" * (annotation.MAX_BYTES + 1))
    doc = view.to_document(view.view(topo))
    assert doc["gpus"][0]["memoryMiB"] == 81559 and doc["links"][0]["gpus"] == [0, 1]


def test_dashboard_samples_from_gpu_nodes():
    a100 = node_manifest("a", machine("DGX-A100"))
    bare = node_manifest("b", machine("L40S-8-PCIE"))
    bare["metadata"]["annotations"].pop(TOPOLOGY_ANNOTATION)  # no agent report yet: no samples, no error
    broken = node_manifest("c", machine("DGX-H100"))
    broken["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = '{"v": 99}'
    samples = topology_samples([a100, bare, broken])
    assert samples.nodes == [("a", "DGX-A100")] and samples.invalid == 1
    assert len(samples.gpus) == 8 and samples.gpus[2] == ("a", "2", "NVIDIA A100-SXM4-40GB", "1", "off")
    assert len(samples.links) == 28 and samples.links[0] == (("a", "0", "1", "NV12"), 300)


def test_the_controllers_metrics_carry_the_topology():
    from prometheus_client import CollectorRegistry, generate_latest

    from kgwe.observability.collectors import ClusterSnapshot, ClusterStateCollector

    registry = CollectorRegistry()
    nodes = [node_manifest("h", machine("DGX-H100")), node_manifest("l", machine("L40S-8-PCIE"))]
    registry.register(ClusterStateCollector(lambda: ClusterSnapshot(nodes=nodes)))
    text = generate_latest(registry).decode()
    assert 'kgwe_node_topology_info{node="h",topology="HGX-H100"} 1.0' in text
    assert 'kgwe_node_gpu_link_gbps{gpu_a="0",gpu_b="7",link="NV18",node="h"} 450.0' in text
    assert 'kgwe_node_gpu_link_gbps{gpu_a="3",gpu_b="4",link="SYS",node="l"} 16.0' in text
    assert 'kgwe_node_gpu_info{gpu="5",mig="off",model="NVIDIA L40S",node="l",numa_node="1"} 1.0' in text
    assert "kgwe_fleet_topology_annotations_invalid 0.0" in text
