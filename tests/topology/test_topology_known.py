"""The checked-in real matrices load into a model that prints back the same `nvidia-smi topo -m` cells."""

from __future__ import annotations

import pytest

from kgwe.errors import KgweError
from kgwe.topology import known
from kgwe.topology.parser import parse_known_file, parse_topo_matrix

REQUIRED = {
    "DGX-1-V100",
    "DGX-A100",
    "HGX-H100",
    "A100-PCIE-PAIRS-ADJACENT",
    "A100-PCIE-PAIRS-NONADJACENT",
    "L40S-8-PCIE",
    "GB200-TRAY",
}


def test_required_names_are_known_and_alias_resolves():
    assert set(known.names()) >= REQUIRED
    assert known.load("DGX-H100") is known.load("HGX-H100")
    assert known.load("dgx-a100").name == "DGX-A100"
    with pytest.raises(KgweError, match="unknown topology"):
        known.load("DGX-9000")


@pytest.mark.parametrize("name", known.names())
def test_model_prints_the_source_matrix(name):
    topo = known.load(name)
    source = parse_known_file(known.source_text(name))
    assert topo.matrix() == source.topo.cells
    assert [g.numa_node for g in topo.gpus] == list(source.topo.numa_affinity)
    assert len({g.uuid for g in topo.gpus}) == topo.size
    assert len({g.pci_bus_id for g in topo.gpus}) == topo.size


def test_dgx1_cube_mesh_bandwidths():
    topo = known.load("DGX-1-V100")
    bw = topo.bandwidth_gbps
    assert bw[0][3] == 50.0 and bw[0][4] == 50.0  # NV2
    assert bw[0][1] == 25.0  # NV1
    assert bw[0][5] == 6.0  # SYS over QPI
    assert topo.pcie[0][1] == "PIX" and topo.pcie[0][3] == "PHB"
    assert topo.gpus[0].pci_bus_id == "00000000:06:00.0"


def test_nvswitch_fabric_gives_every_pair_the_fabric_bandwidth():
    topo = known.load("DGX-A100")
    assert [gpu.nvswitch_links for gpu in topo.gpus] == [12] * 8
    pairs = [(i, j) for i in range(8) for j in range(i + 1, 8)]
    assert {topo.bandwidth_gbps[i][j] for i, j in pairs} == {300.0}
    assert {topo.via(i, j) for i, j in pairs} == {"nvswitch"}
    assert all(row[j] == 0 for row in topo.nvlinks for j in range(8))  # no direct pair links
    h100 = known.load("HGX-H100")
    assert h100.bandwidth_gbps[0][7] == 450.0 and h100.label(0, 7) == "NV18"


def test_bridged_pairs_are_direct_links_not_fabric():
    topo = known.load("A100-PCIE-PAIRS-NONADJACENT")
    assert topo.via(0, 2) == "nvlink" and topo.bandwidth_gbps[0][2] == 300.0
    assert topo.via(0, 1) == "pcie" and topo.bandwidth_gbps[0][1] < 30


def test_parser_reads_real_nvidia_smi_output_with_nics_and_old_names():
    text = (
        "\x1b[4m\tGPU0\tGPU1\tGPU2\tmlx5_0\tCPU Affinity\tNUMA Affinity\x1b[0m\n"
        "GPU0\t X \tNV2\tSOC\tPIX\t0-19,40-59\t0\n"
        "GPU1\tNV2\t X \tSOC\tPIX\t0-19,40-59\t0\n"
        "GPU2\tSOC\tSOC\t X \tSOC\t20-39\tN/A\n"
        "mlx5_0\tPIX\tPIX\tSOC\t X \t\t\n\nLegend:\n  X    = Self\n"
    )
    m = parse_topo_matrix(text)
    assert m.indices == (0, 1, 2)
    assert m.cells[0] == ("X", "NV2", "SYS")
    assert m.cpu_affinity == ("0-19,40-59", "0-19,40-59", "20-39")
    assert m.numa_affinity == (0, 0, None)


@pytest.mark.parametrize(
    "text, message",
    [
        ("no matrix here", "no `nvidia-smi topo -m` matrix"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV2\t X \n", "not symmetric"),
        ("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n", "unknown topology matrix cell"),
    ],
)
def test_parser_rejects_bad_matrices_with_a_clear_error(text, message):
    with pytest.raises(KgweError, match=message):
        parse_topo_matrix(text)
