"""GPU health without a cluster: fault injection in the fake NVML, classification, hysteresis, the Node
condition and taint patches, and the extender's per-GPU accounting of unhealthy GPUs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pynvml
import pytest

from kgwe.agent import health, node_state
from kgwe.extender.core import NodeTable, describe
from kgwe.extender.k8s import account
from kgwe.extender.k8s import node_state as extender_node_state
from kgwe.extender.request import PodRequest
from kgwe.topology import health as annotation
from kgwe.topology import known
from kgwe.topology.fake_nvml import FakeNvml, parse_faults
from kgwe.vocab import GPU_UNHEALTHY_TAINT

T0 = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)


def probe_with(faults: str, clock=None) -> tuple[FakeNvml, health.Probe]:
    kw = {"clock": clock} if clock else {}
    nvml = FakeNvml.for_known("DGX-A100", faults=parse_faults(faults), **kw)
    nvml.nvmlInit()
    return nvml, health.Probe(nvml)


def test_fault_syntax_is_checked() -> None:
    assert parse_faults("3:xid=79@10, 1:ecc=2;0:thermal") == [
        parse_faults("3:xid=79@10")[0],
        parse_faults("1:ecc=2")[0],
        parse_faults("0:thermal")[0],
    ]
    for bad in ("x:xid=1", "3:melt", "3:xid=seven", "3"):
        with pytest.raises(ValueError, match="fault"):
            parse_faults(bad)


def test_probe_reads_every_fault_kind_through_pynvml_calls() -> None:
    _, probe = probe_with(
        "3:xid=79,1:ecc=2,2:thermal,4:power-brake,5:remap-pending,6:retired-pending,7:xid=13"
    )
    by_index = {s.index: s for s in probe.sample()}
    assert by_index[3].xids == (79,)
    assert by_index[7].xids == (13,)
    assert by_index[1].ecc_uncorrected_volatile == 2
    assert by_index[2].clocks_event_reasons & pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert by_index[4].clocks_event_reasons & pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    assert by_index[5].remap_pending and not by_index[5].remap_failed
    assert by_index[6].retired_pages_pending
    idle = pynvml.nvmlClocksEventReasonGpuIdle
    assert by_index[0] == health.GPUSample(
        0, nvlink_errors=0, ecc_uncorrected_volatile=0, clocks_event_reasons=idle
    )
    assert not any(s.xids for s in probe.sample())  # an XID event is delivered once


def test_a_lost_gpu_is_reported_and_the_others_still_read() -> None:
    now = [0.0]
    _, probe = probe_with("2:lost@5,2:xid=79@5", clock=lambda: now[0])
    assert not any(s.lost for s in probe.sample())  # registers for XID events while the GPU is there
    now[0] = 6.0
    samples = probe.sample()
    assert [s.index for s in samples] == list(range(8))
    lost = samples[2]
    assert lost.lost and lost.xids == (79,)
    assert all(not s.lost for s in samples if s.index != 2)
    assert [f.reason for f in health.classify(lost, None)] == ["XID79", "GPULost"]


def test_faults_appear_at_their_time() -> None:
    now = [100.0]
    _, probe = probe_with("1:ecc=1@10", clock=lambda: now[0])
    assert probe.sample()[1].ecc_uncorrected_volatile == 0
    now[0] = 111.0
    assert probe.sample()[1].ecc_uncorrected_volatile == 1


def test_nvlink_errors_count_only_when_they_rise_fast() -> None:
    _, probe = probe_with("0:nvlink=50")
    first = probe.sample()[0]
    second = probe.sample()[0]
    assert second.nvlink_errors is not None and first.nvlink_errors is not None
    rise = second.nvlink_errors - first.nvlink_errors
    assert rise > health.NVLINK_ERRORS_PER_PERIOD  # 12 links x 2 counters x 50
    assert [f.reason for f in health.classify(second, first.nvlink_errors)] == ["NVLinkErrors"]
    assert health.classify(second, None) == []  # no baseline yet: no verdict


def test_application_xids_leave_the_gpu_healthy() -> None:
    for xid in health.APPLICATION_XIDS:
        assert health.classify(health.GPUSample(0, xids=(xid,)), None) == []
    assert health.classify(health.GPUSample(0, xids=(48,)), None)[0].reason == "XID48"


def sick(i: int = 3) -> health.GPUSample:
    return health.GPUSample(i, ecc_uncorrected_volatile=1)


def well(i: int = 3) -> health.GPUSample:
    return health.GPUSample(i)


def test_unhealthy_at_once_healthy_only_after_clean_periods() -> None:
    tracker = health.HealthTracker(recover_after_periods=3, xid_hold_periods=2)
    changes = tracker.update([sick(), well(1)], T0)
    assert [(c.index, c.healthy) for c in changes] == [(3, False)]
    assert tracker.faults()[3] == annotation.GPUFault(
        "ECCUncorrectable", "1 volatile uncorrectable ECC error(s) since the last reset", T0
    )
    assert tracker.update([well()], T0 + timedelta(minutes=1)) == []
    assert tracker.update([well()], T0 + timedelta(minutes=2)) == []
    assert 3 in tracker.faults()
    changes = tracker.update([well()], T0 + timedelta(minutes=3))
    assert [(c.index, c.healthy) for c in changes] == [(3, True)]
    assert tracker.faults() == {}


def test_a_flapping_gpu_stays_unhealthy_and_keeps_its_since() -> None:
    tracker = health.HealthTracker(recover_after_periods=2)
    transitions = []
    for k in range(10):
        transitions += tracker.update([sick() if k % 2 == 0 else well()], T0 + timedelta(minutes=k))
    assert [(t.index, t.healthy) for t in transitions] == [(3, False)]
    assert tracker.faults()[3].since == T0


def test_an_xid_is_held_for_its_periods() -> None:
    tracker = health.HealthTracker(recover_after_periods=1, xid_hold_periods=3)
    tracker.update([health.GPUSample(0, xids=(79,))], T0)
    tracker.update([well(0)], T0)
    tracker.update([well(0)], T0)
    assert tracker.faults()[0].reason == "XID79"
    assert tracker.update([well(0)], T0) and tracker.faults() == {}


def test_condition_patch_only_on_change_and_transition_time_moves_on_flip() -> None:
    faults = {3: annotation.GPUFault("XID79", "XID 79: GPU has fallen off the bus", T0)}
    patch = node_state.condition_patch(None, faults, T0)
    assert patch is not None
    cond = patch["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("GPUHealthy", "False", "GPUsUnhealthy")
    assert "GPU 3: XID79" in cond["message"]
    current = (cond["status"], cond["reason"], cond["message"], T0)
    assert node_state.condition_patch(current, faults, T0 + timedelta(minutes=5)) is None
    later = T0 + timedelta(minutes=9)
    healed = node_state.condition_patch(current, {}, later)
    assert healed is not None
    assert healed["status"]["conditions"][0]["status"] == "True"
    assert healed["status"]["conditions"][0]["lastTransitionTime"] == "2026-11-23T22:09:00Z"


def test_taint_added_and_removed_keeping_other_taints() -> None:
    other = {"key": "dedicated", "value": "ml", "effect": "NoSchedule", "time_added": None}
    added = node_state.desired_taints([other], tainted=True)
    assert added == [
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
        {"key": GPU_UNHEALTHY_TAINT, "value": "true", "effect": "NoSchedule"},
    ]
    assert node_state.desired_taints([other, *added[1:]], tainted=True) is None
    assert node_state.desired_taints([other, *added[1:]], tainted=False) == [
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    ]


def h100_node(health_value: str | None) -> dict:
    from kgwe.topology import annotation as topo_annotation

    topo = known.load("HGX-H100")
    ann = {topo_annotation.ANNOTATION_KEY: topo_annotation.encode(topo)}
    if health_value is not None:
        ann[annotation.ANNOTATION_KEY] = health_value
    return {
        "metadata": {
            "name": "h100",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "annotations": ann,
        },
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "200", "memory": "2000Gi"}},
    }


def test_the_extender_never_places_on_an_unhealthy_gpu() -> None:
    faults = {3: annotation.GPUFault("XID79", "fallen off the bus", T0)}
    base = extender_node_state(h100_node(annotation.encode(faults)), known_decode)
    assert dict(base.unhealthy) == {3: "XID79"}
    state = account(base, [])
    assert state.gpu_used_milli[3] == 1000 and sum(state.gpu_used_milli) == 1000
    table = NodeTable()
    row = table.upsert(state)
    eight, one = PodRequest(gpus=8), PodRequest(gpus=1)
    assert table.choose_gpus(row, one) and 3 not in table.choose_gpus(row, one)
    codes, _, _ = table.evaluate(np.array([row]), eight, _profile())
    assert codes[0] != 0
    assert "GPU 3 (XID79)" in describe(int(codes[0]), table, row, eight)
    # a malformed annotation is ignored (not a reason to drop the node); healthy again: all 8 usable
    assert extender_node_state(h100_node("{broken"), known_decode).unhealthy == {}
    healed = account(extender_node_state(h100_node("{}"), known_decode), [])
    assert healed.gpu_used_milli == [0] * 8


def known_decode(raw: str):
    from kgwe.topology import annotation as topo_annotation

    return topo_annotation.decode(raw)


def _profile():
    from kgwe.extender.profile import Profile

    return Profile()


def test_the_inventory_snapshot_marks_unhealthy_gpus_for_the_planner() -> None:
    from kgwe.cluster.inventory import facts_from_objects, inventory_document

    faults = {1: annotation.GPUFault("XID79", "fallen off the bus", T0)}
    node = {
        "metadata": {
            "name": "h1",
            "labels": {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "annotations": {annotation.ANNOTATION_KEY: annotation.encode(faults)},
        }
    }
    doc = inventory_document(facts_from_objects([node], {}))
    assert doc["spec"]["nodes"][0]["devices"] == [{"index": 1, "unhealthy": True}]
    node["metadata"]["annotations"][annotation.ANNOTATION_KEY] = "{not json"
    assert "devices" not in inventory_document(facts_from_objects([node], {}))["spec"]["nodes"][0]


def test_workload_pods_on_an_unhealthy_gpu_are_named() -> None:
    from kgwe.workloads.status import unhealthy_placements, with_held_gpus

    placed = [
        {"pod": "train-0", "node": "n1", "gpus": [2, 3]},  # a pod's own gpu-index annotation
        {"pod": "train-1", "node": "n1", "gpus": []},  # known only from the node's gpu-pods annotation
        {"pod": "train-2", "node": "n2", "gpus": []},  # GPUs unknown: not claimed
    ]
    faults = {"n1": {3: "XID79", 5: "ECCUncorrectable"}, "n2": {0: "XID48"}}
    holders = {"n1": {5: "ml/train-1", 6: "ml/train-1", 2: "other/train-2"}, "n2": {}}
    held = with_held_gpus(placed, "ml", holders)
    assert [p["gpus"] for p in held] == [[2, 3], [5, 6], []]  # the pod's own word first; another ns's pod no
    assert placed[1]["gpus"] == []  # a new list: the input is left as it was
    assert unhealthy_placements(held, faults) == [
        "train-0 on n1 GPU 3 (XID79)",
        "train-1 on n1 GPU 5 (ECCUncorrectable)",
    ]
    assert unhealthy_placements(held, {"n1": {}}) == []


def test_a_gpu_nvidias_plugin_withdrew_keeps_its_index() -> None:
    """NVIDIA's plugin advertises 7 of 8 GPUs once it finds GPU 3 unhealthy (GFD still counts 8): the
    extender keeps GPUs 0..7 with GPU 3 taken, so a 7-GPU pod fits on the other seven (not on 0..6)."""
    faults = {3: annotation.GPUFault("XID48", "double-bit ECC error", T0)}
    node = h100_node(annotation.encode(faults))
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = "8"
    node["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    state = account(extender_node_state(node, known_decode), [])
    assert len(state.gpu_used_milli) == 8 and state.gpu_used_milli[3] == 1000
    table = NodeTable()
    row = table.upsert(state)
    seven = PodRequest(gpus=7)
    assert sorted(table.choose_gpus(row, seven)) == [0, 1, 2, 4, 5, 6, 7]
    codes, _, _ = table.evaluate(np.array([row]), seven, _profile())
    assert codes[0] == 0
