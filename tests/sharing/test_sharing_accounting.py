"""Replicas count per physical GPU: the extender packs a replica as 1/R of a GPU (never over one GPU with
gpu-milli shares beside it), the chargeback prices it as that share, rightsizing recommends time-slicing."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import numpy as np

from kgwe.cost.metering import Meter, holdings, node_info
from kgwe.cost.rightsizing import UtilizationSeries, recommend, size_of
from kgwe.cost.usage import SHARED, WHOLE
from kgwe.extender.core import NodeTable
from kgwe.extender.k8s import account, node_state, pod_holds
from kgwe.extender.profile import Profile
from kgwe.extender.request import parse_pod

L40S = "NVIDIA-L40S"


def shared_node(replicas: int = 4, renamed: bool = False, gpus: int = 8) -> dict:
    resource = "nvidia.com/gpu.shared" if renamed else "nvidia.com/gpu"
    product = L40S if renamed else f"{L40S}-SHARED"
    return {
        "metadata": {
            "name": "l40s-1",
            "labels": {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.replicas": str(replicas),
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
            },
        },
        "status": {"allocatable": {resource: str(gpus * replicas), "cpu": "64", "memory": "512Gi"}},
    }


def pod(resources: dict, milli: str | None = None, node: str | None = None, uid: str = "u") -> dict:
    meta: dict = {"name": uid, "namespace": "ds-notebooks", "uid": uid}
    if milli:
        meta["annotations"] = {"kgwe.nvidia.io/gpu-milli": milli}
    spec: dict = {"containers": [{"name": "c", "resources": {"requests": resources, "limits": resources}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


ONE_GPU = {"nvidia.com/gpu": "1"}


def test_node_state_counts_physical_gpus_and_replicas():
    state = node_state(shared_node())
    assert (state.gpus, state.replicas) == (8, 4)  # not the 32 the plugin advertises
    renamed = node_state(shared_node(replicas=2, renamed=True))
    assert (renamed.gpus, renamed.replicas) == (8, 2)
    plain = node_state({"metadata": {"name": "n", "labels": {}}, "status": {"allocatable": ONE_GPU}})
    assert plain.replicas == 1


def test_bound_replicas_fill_one_gpu_four_at_a_time():
    base = node_state(shared_node())
    held = [pod_holds(pod(ONE_GPU, node="l40s-1", uid=f"p{i}")) for i in range(5)]
    state = account(base, held)
    assert sorted(state.gpu_used_milli, reverse=True)[:3] == [1000, 250, 0]


def test_filter_packs_replicas_and_never_overcommits_beside_milli_shares():
    table = NodeTable()
    row = table.upsert(node_state(shared_node(gpus=2)))
    profile = Profile()
    rows = np.array([row])
    half = parse_pod(pod({"nvidia.com/gpu.shared": "1"}, milli="500"))
    replica = parse_pod(pod(ONE_GPU))
    for req in (half, replica, replica):  # 500 + 250 + 250 on GPU 0 (best fit packs)
        reason, _, best = table.evaluate(rows, req, profile)
        assert reason[0] == 0
        table.allocate(row, req, table.choose_gpus(row, req, int(best[0])))
    assert table.gpu_free[row, :2].tolist() == [0, 1000]
    for _ in range(4):  # four more replicas fill GPU 1; the fifth finds no room
        reason, _, best = table.evaluate(rows, replica, profile)
        assert reason[0] == 0
        table.allocate(row, replica, table.choose_gpus(row, replica, int(best[0])))
    reason, _, _ = table.evaluate(rows, replica, profile)
    assert reason[0] != 0 and table.gpu_free[row, :2].tolist() == [0, 0]
    # a small milli share still takes a whole replica's room: no GPU serves more pods than replicas
    table2 = NodeTable()
    row2 = table2.upsert(node_state(shared_node(gpus=1)))
    tiny = parse_pod(pod({"nvidia.com/gpu.shared": "1"}, milli="50"))
    for _ in range(4):
        _, _, best = table2.evaluate(np.array([row2]), tiny, profile)
        table2.allocate(row2, tiny, table2.choose_gpus(row2, tiny, int(best[0])))
    assert table2.evaluate(np.array([row2]), tiny, profile)[0][0] != 0


def test_metering_prices_a_replica_as_its_share():
    info = node_info(shared_node(), lambda labels: False)
    assert info is not None and (info.gpu_count, info.replicas) == (8, 4)
    held, reason = holdings(pod(ONE_GPU, node="l40s-1"), info.replicas)
    assert reason is None and [(h.kind, h.count, h.gpu_milli) for h in held] == [(SHARED, 1, 250)]
    assert [(h.kind, h.count) for h in holdings(pod(ONE_GPU))[0]] == [(WHOLE, 1)]
    meter = Meter({"l40s-1": info}, {"ds-notebooks": "data-science"})
    (start,) = meter.observe("ADDED", pod(ONE_GPU, node="l40s-1"), datetime(2026, 11, 1, tzinfo=UTC))
    assert (start.interval.kind, start.interval.gpu_milli) == (SHARED, 250)
    (end,) = meter.observe("DELETED", pod(ONE_GPU, node="l40s-1"), datetime(2026, 11, 2, tzinfo=UTC))
    assert end.resource == holdings(pod(ONE_GPU), 4)[0][0].resource  # closes the interval it opened


def test_rightsizing_recommends_time_slicing_with_its_monthly_saving():
    series = UtilizationSeries("ds-notebooks", "nb-1", [0.05, 0.08, 0.09] * 100, [4_000.0] * 300, 8 * 86400.0)
    rec = recommend(series, L40S, size_of(L40S, WHOLE, 1), price_per_hour=Decimal("1.20"), currency="USD")
    assert rec is not None and rec.recommended.replicas == 8 and rec.downsizable
    assert rec.monthly_saving == Decimal("766.50")  # 7/8 of 1.20 USD/h over 730 h
    assert rec.sharing_advice == "uses 9% of a GPU at p90: time-slice ×8 saves 766.50 USD/month"
    # memory decides too: 10 GB at p95 (+15%) fits a quarter of an L40S (45 GiB), not an eighth
    heavier = UtilizationSeries("ds", "nb", [0.05] * 100, [10_000.0] * 100, 86400.0)
    assert recommend(heavier, L40S, size_of(L40S, WHOLE, 1)).recommended.replicas == 4
