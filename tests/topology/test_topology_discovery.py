"""The real NVML discovery code, run against the fake pynvml replaying every known matrix."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from kgwe.gpu import catalog
from kgwe.topology import discovery, known
from kgwe.topology.fake_nvml import FakeNvml
from kgwe.topology.model import MigDevice
from kgwe.topology.parser import parse_known_file


@pytest.mark.parametrize("name", known.names())
def test_discovery_reproduces_the_source_matrix(name):
    expected = known.load(name)
    found = discovery.discover(FakeNvml.for_known(name), name=name, sys_gbps=expected.rates.sys_gbps)
    source = parse_known_file(known.source_text(name)).topo
    assert found.topology.matrix() == source.cells
    assert [g.cpu_affinity for g in found.topology.gpus] == list(source.cpu_affinity)
    assert [g.numa_node for g in found.topology.gpus] == list(source.numa_affinity)
    assert found.topology == expected
    assert found.warnings == []


def test_mig_profiles_and_placements_come_from_the_driver():
    found = discovery.discover(FakeNvml.for_known("HGX-H100"))
    model = catalog.models_matching("NVIDIA H100 80GB HBM3")[0]
    reported = found.mig_profiles[0]
    for name, placements in reported.items():
        assert placements == model.profile(name).placements
    assert {"1g.10gb", "3g.40gb", "7g.80gb"} <= set(reported)
    assert found.mig_pending == {i: False for i in range(8)}
    assert discovery.discover(FakeNvml.for_known("L40S-8-PCIE")).mig_profiles == {}


def test_mig_instances_and_pending_mode_change():
    fake = FakeNvml.for_known(
        "DGX-A100", mig={1: [("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)]}, mig_pending=[2]
    )
    found = discovery.discover(fake)
    gpu1 = found.topology.gpus[1]
    assert gpu1.mig_enabled and not found.topology.gpus[0].mig_enabled
    assert gpu1.mig_devices == (
        MigDevice("3g.20gb", 0, 4),
        MigDevice("2g.10gb", 4, 2),
        MigDevice("1g.5gb", 6, 1),
    )
    assert found.mig_pending[2] is True
    assert any("GPU2" in w and "pending" in w for w in found.warnings)


def test_lost_gpu_is_left_out_not_fatal():
    found = discovery.discover(FakeNvml.for_known("DGX-1-V100", lost=[3]))
    assert [g.index for g in found.topology.gpus] == [0, 1, 2, 4, 5, 6, 7]
    assert any("GPU3 left out" in w for w in found.warnings)
    topo = found.topology
    assert topo.label(topo.position(0), topo.position(4)) == "NV2"


def test_invisible_switches_in_a_vm_still_count_as_fabric():
    found = discovery.discover(
        FakeNvml.for_known("HGX-H100", hidden_switches=True), name="HGX-H100", sys_gbps=22
    )
    assert found.topology == known.load("HGX-H100")


def test_nvlinks_down_fall_back_to_pcie_with_a_warning():
    found = discovery.discover(FakeNvml.for_known("DGX-A100", nvlink_down=True))
    assert found.topology.matrix()[0] == ("X", "PXB", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS")
    assert found.inactive_links == {i: 12 for i in range(8)}
    assert any("fabricmanager" in w for w in found.warnings)


def test_p2p_index_quirk_is_normalised():
    assert pynvml.NVML_P2P_CAPS_INDEX_READ == (0,)  # the quirk this guards against
    assert discovery.p2p_read_index(pynvml) == 0
    fake = FakeNvml.for_known("L40S-8-PCIE")
    fake.nvmlInit()
    h0, h1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(ctypes.ArgumentError):
        fake.nvmlDeviceGetP2PStatus(h0, h1, pynvml.NVML_P2P_CAPS_INDEX_READ)
    assert fake.nvmlDeviceGetP2PStatus(h0, h1, 0) == pynvml.NVML_P2P_STATUS_OK


def test_bus_ids_match_across_formats_and_affinity_words_decode():
    assert discovery.bus_key(b"0000:0a:00.0") == discovery.bus_key("00000000:0A:00.0") == (0, 10, 0)
    assert discovery.bus_key("garbage") is None
    words = (ctypes.c_ulonglong * 2)()
    words[0] = (1 << 20) - 1
    words[1] = 0b1111 << 4  # CPUs 68-71
    assert discovery.cpu_ranges(words) == "0-19,68-71"


def test_no_driver_is_one_clear_error():
    with pytest.raises(discovery.NoDriverError, match="no NVIDIA driver"):
        discovery.discover(FakeNvml.for_known("HGX-H100", no_driver=True))
    with pytest.raises(discovery.NoDriverError, match="no NVIDIA driver"):
        discovery.discover(pynvml)  # this machine has no GPU: the real library is absent
