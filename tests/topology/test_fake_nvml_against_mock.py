"""FakeNvml, the NVML KGWE's unit tests and kwok-only topologies use, held to what NVIDIA's own mock NVML
library answers through the real nvidia-ml-py: the same calls the agent makes (discovery, the raw types it
decodes, the XID event wait, the health probe over several periods), on the same machine (HGX H100),
healthy and with each failure the mock can inject.

Where the two differ because they describe different machines of the same model (UUIDs, PCI bus ids, the
driver version, CPU affinity, which depend on the box) the test says so; where they differ in behaviour the
difference is asserted, named and documented (docs/nvidia-stack.md): the mock reports nominal memory
(80 GiB = 81920 MiB, a real H100 81559), creates no MIG instances (no GPU-instance profiles), and marks row
remapping failed on an uncorrectable ECC error.
"""

from __future__ import annotations

import pytest

from kgwe.topology.fake_nvml import FakeNvml, parse_faults
from tests.harness.nvml_answers import answers, from_mock

# Per-box identity: differs between any two machines of one model.
_IDENTITY = {"driver_version", "uuids", "bus_ids", "cpu_affinity"}
# Behaviour where NVIDIA's mock is not (yet) the hardware FakeNvml replays; asserted below.
_MOCK_LIMITS = {"memory_mib", "mig_profiles"}


def _compare(mock: dict, fake: dict) -> None:
    for key, value in fake["discovery"].items():
        if key not in _IDENTITY | _MOCK_LIMITS:
            assert mock["discovery"][key] == value, key
    assert mock["types"] == fake["types"]
    assert mock["empty_wait"] == fake["empty_wait"] == "NVMLError_Timeout:10"
    assert mock["faults"] == fake["faults"]
    assert mock["xids_seen"] == fake["xids_seen"]
    gpus = fake["discovery"]["indices"]
    assert mock["discovery"]["memory_mib"] == [81920] * len(gpus)  # nominal 80 GiB
    assert fake["discovery"]["memory_mib"] == [81559] * len(gpus)  # what an H100 80GB HBM3 reports
    assert mock["discovery"]["mig_profiles"] == {}, "the mock has no GPU-instance profiles"
    assert fake["discovery"]["mig_profiles"]["0"][-1] == "7g.80gb"


def test_healthy_hgx_h100_answers_alike(nvidia_binaries, tmp_path):
    mock = from_mock(nvidia_binaries, "h100", tmp_path / "driver")
    fake = answers(FakeNvml.for_known("HGX-H100"))
    _compare(mock, fake)
    assert mock["discovery"]["known"] == "HGX-H100"
    assert mock["discovery"]["nvswitch_links"] == [18] * 8
    assert mock["samples"] == fake["samples"], "the health probe reads the same from both"
    assert mock["faults"] == {}
    assert mock["discovery"]["driver_version"] == nvidia_binaries.driver_version


def test_an_uncorrectable_ecc_error_with_an_xid_reads_alike(nvidia_binaries, tmp_path):
    mock = from_mock(nvidia_binaries, "h100", tmp_path / "driver", [(3, "ecc_uncorrectable", 48)])
    fake = answers(FakeNvml.for_known("HGX-H100", faults=parse_faults("3:xid=48,3:ecc=1")))
    _compare(mock, fake)
    assert mock["faults"] == {"3": "ECCUncorrectable"}  # the XID is held, the standing fault first
    assert mock["xids_seen"] == {"3": [48]}, "the Xid is delivered once, through the event set"
    mock3, fake3 = mock["samples"][3], fake["samples"][3]
    assert mock3["ecc_uncorrected_volatile"] > 0 and fake3["ecc_uncorrected_volatile"] > 0
    assert mock3["remap_failed"] and not fake3["remap_failed"]  # the mock also fails row remapping
    assert all(s == f for s, f in zip(mock["samples"], fake["samples"], strict=True) if s["index"] != 3)


def test_a_lost_gpu_reads_alike_and_stays_lost(nvidia_binaries, tmp_path):
    mock = from_mock(nvidia_binaries, "h100", tmp_path / "driver", [(3, "lost", None)], health_rounds=5)
    fake = answers(FakeNvml.for_known("HGX-H100", faults=parse_faults("3:lost")), health_rounds=5)
    assert mock["discovery"]["indices"] == fake["discovery"]["indices"] == [0, 1, 2, 4, 5, 6, 7]
    assert [w.split(" (")[0] for w in mock["discovery"]["warnings"]] == ["GPU3 left out: GPU is lost"]
    assert [w.split(" (")[0] for w in fake["discovery"]["warnings"]] == ["GPU3 left out: GPU is lost"]
    assert mock["faults"] == fake["faults"] == {"3": "GPULost"}
    assert mock["samples"][3] == fake["samples"][3]


@pytest.mark.parametrize("profile", ["a100", "gb200", "gb300", "b200", "l40s", "t4"])
def test_every_shipped_profile_is_discovered(nvidia_binaries, tmp_path, profile):
    """The agent's discovery reads every machine NVIDIA's mock ships, without an error or a fault."""
    from kgwe.localcluster.mocknvml import profile_gpus

    mock = from_mock(nvidia_binaries, profile, tmp_path / "driver", health_rounds=1)
    assert mock["discovery"]["indices"] == [g.index for g in profile_gpus(tmp_path / "driver")]
    assert mock["discovery"]["uuids"] == [g.uuid for g in profile_gpus(tmp_path / "driver")]
    assert mock["faults"] == {}
    links = set(mock["discovery"]["nvswitch_links"])
    assert links == ({12} if profile == "a100" else {18} if profile.startswith("gb") else {0}), links
