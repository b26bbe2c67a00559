"""The scoring core on plain data: filter reasons, per-GPU share accounting, strategies, FGD term, caching."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgwe.extender import core
from kgwe.extender.core import NodeTable, ShapeCache, WorkloadType, describe
from kgwe.extender.engine import Engine
from kgwe.extender.nodes import NodeState
from kgwe.extender.profile import Profile
from kgwe.extender.request import PodRequest
from kgwe.topology import known


def table_of(*nodes: NodeState) -> NodeTable:
    t = NodeTable(max_gpus=8, capacity=2)  # small capacity: growth is exercised too
    for n in nodes:
        t.upsert(n)
    return t


def evaluate(t: NodeTable, req: PodRequest, profile: Profile | None = None):
    rows = np.array([t.rows[n] for n in t.rows if t.names[t.rows[n]]])
    reason, score, best = t.evaluate(rows, req, profile or Profile(fragmentation=0))
    names = [t.names[r] for r in rows]
    return dict(zip(names, reason.tolist(), strict=True)), dict(zip(names, score.tolist(), strict=True)), best


def test_whole_gpu_count_filter_and_reason() -> None:
    t = table_of(NodeState("a", gpus=8, gpu_used_milli=[1000] * 7), NodeState("b", gpus=8))
    reason, _, _ = evaluate(t, PodRequest(gpus=2))
    assert reason == {"a": core.WHOLE, "b": core.OK}
    assert describe(core.WHOLE, t, t.rows["a"], PodRequest(gpus=2)) == (
        "kgwe: pod needs 2 whole GPUs, node has 1 of 8 free"
    )


def test_share_is_accounted_per_physical_gpu() -> None:
    # 3 GPUs each 600/1000 used: 1200 milli free in total but no single GPU has 500
    t = table_of(
        NodeState("a", gpus=3, gpu_used_milli=[600, 600, 600]), NodeState("b", gpus=1, gpu_used_milli=[400])
    )
    req = PodRequest(gpus=1, gpu_milli=500)
    reason, _, _best = evaluate(t, req)
    assert reason == {"a": core.SHARE, "b": core.OK}
    assert "the freest GPU has 400/1000 left" in describe(core.SHARE, t, t.rows["a"], req)


def test_share_packs_onto_partly_used_gpu() -> None:
    t = table_of(NodeState("a", gpus=2, gpu_used_milli=[0, 500]))
    row = t.rows["a"]
    req = PodRequest(gpus=1, gpu_milli=400)
    _, _, best = t.evaluate(np.array([row]), req, Profile(fragmentation=0))
    assert t.choose_gpus(row, req, int(best[0])) == (1,)
    t.allocate(row, req, (1,))
    assert t.gpu_free[row, :2].tolist() == [1000, 100]


def test_product_family_memory_and_mig_filters() -> None:
    h = NodeState(
        "h",
        gpus=8,
        product="NVIDIA-H100-80GB-HBM3",
        family="hopper",
        gpu_memory_mib=81559,
        mig_free={"1g.10gb": 2, "3g.40gb": 1, "2g.20gb": 1},
    )
    a = NodeState("a", gpus=8, product="NVIDIA-A100-SXM4-40GB", family="ampere", gpu_memory_mib=40960)
    t = table_of(h, a)
    assert evaluate(t, PodRequest(gpus=1, products=("h100",)))[0] == {"h": core.OK, "a": core.PRODUCT}
    assert evaluate(t, PodRequest(gpus=1, families=("ampere",)))[0] == {"h": core.FAMILY, "a": core.OK}
    assert evaluate(t, PodRequest(gpus=1, min_memory_mib=76294))[0] == {"h": core.OK, "a": core.MEMORY}
    mig = PodRequest(mig=(("1g.10gb", 3),))
    assert evaluate(t, mig)[0] == {"h": core.MIG, "a": core.MIG}
    assert describe(core.MIG, t, t.rows["h"], mig) == "kgwe: MIG instances not available: 3x 1g.10gb (free 2)"
    assert evaluate(t, PodRequest(mig=(("1g.10gb", 2),)))[0]["h"] == core.OK


def test_min_bandwidth_uses_topology_choice() -> None:
    engine = Engine(
        table_of(
            NodeState("dgx", gpus=8, topology=known.load("DGX-H100")),
            NodeState("pcie", gpus=8, topology=known.load("L40S-8-PCIE")),
            NodeState("bare", gpus=8),
        )
    )
    reason, _score, _ = evaluate(engine.table, PodRequest(gpus=2, min_bandwidth_gbps=100), Profile())
    assert reason == {"dgx": core.OK, "pcie": core.TOPOLOGY, "bare": core.NO_TOPOLOGY}


def test_nvlink_pair_beats_pcie_pair_for_nvlink_preference() -> None:
    engine = Engine(
        table_of(
            NodeState("pairs", gpus=8, topology=known.load("A100-PCIE-PAIRS-ADJACENT")),
            NodeState("pcie", gpus=8, topology=known.load("L40S-8-PCIE")),
        )
    )
    _, score, _ = evaluate(engine.table, PodRequest(gpus=2, preference="NVLinkOptimal"), Profile())
    assert score["pairs"] > score["pcie"]


@pytest.mark.parametrize(
    "strategy,winner",
    [
        ("BinPack", "busy"),
        ("Spread", "idle"),
        ("LeastLoaded", "idle"),
        ("BestFit", "busy"),
        ("Priority", "idle"),
    ],
)
def test_strategies_rank_busy_and_idle_nodes(strategy: str, winner: str) -> None:
    t = table_of(NodeState("busy", gpus=8, gpu_used_milli=[1000] * 6), NodeState("idle", gpus=8, priority=90))
    _, score, _ = evaluate(
        t, PodRequest(gpus=1), Profile(strategy=strategy, topology=0, balance=0, fragmentation=0)
    )
    assert max(score, key=score.get) == winner


def test_cost_optimized_prefers_cheaper_product() -> None:
    t = table_of(
        NodeState("h", gpus=8, product="NVIDIA-H100-80GB-HBM3"), NodeState("l", gpus=8, product="NVIDIA-L40S")
    )
    p = Profile(strategy="CostOptimized", prices=(("h100", 4.1), ("l40s", 1.2)), fragmentation=0)
    _, score, _ = evaluate(t, PodRequest(gpus=1), p)
    assert score["l"] > score["h"]


def test_fragmentation_term_avoids_stranding_a_share() -> None:
    # Workload: half-GPU pods. Node a has a GPU with 500 free; node b has one with 700 free.
    # A 200-milli pod on b leaves 500 (still usable by the mix); on a it leaves 300 (stranded).
    t = table_of(NodeState("a", gpus=1, gpu_used_milli=[500]), NodeState("b", gpus=1, gpu_used_milli=[300]))
    t.set_mix([WorkloadType(1, 500, 0, 0, 1.0)])
    req = PodRequest(gpus=1, gpu_milli=200)
    _, with_frag, _ = evaluate(t, req, Profile(strategy="BestFit", topology=0, balance=0, fragmentation=100))
    _, without, _ = evaluate(t, req, Profile(strategy="BestFit", topology=0, balance=0, fragmentation=0))
    assert max(without, key=without.get) == "a"  # plain best fit strands 300
    assert max(with_frag, key=with_frag.get) == "b"


def test_frag_counts_idle_share_a_type_cannot_use() -> None:
    t = table_of(NodeState("a", gpus=2, gpu_used_milli=[800, 0]))
    t.set_mix([WorkloadType(1, 1000, 0, 0, 1.0)])
    assert t.frag[t.rows["a"]] == pytest.approx(200.0)  # the 200 left on GPU 0 is a fragment for 1-GPU pods


def test_idle_gpus_of_another_product_are_all_fragment_for_a_pinned_shape() -> None:
    t = table_of(NodeState("t4", gpus=2, product="Tesla-T4"), NodeState("a10", gpus=2, product="NVIDIA-A10"))
    t.set_mix([WorkloadType(1, 1000, 0, 0, 1.0, ("t4",))])
    assert t.frag[t.rows["t4"]] == 0.0
    assert t.frag[t.rows["a10"]] == pytest.approx(2000.0)  # a T4-pinned pod can use none of it


def test_unpinned_pod_leaves_the_scarce_product_to_pods_pinned_to_it() -> None:
    # 1 T4 node and 3 A10 nodes; a fifth of the pods are pinned to T4. Plain scoring ranks the four idle
    # nodes alike (the T4 node first by order); the fragmentation term sends an unpinned pod to an A10.
    nodes = [NodeState("t4", gpus=4, product="Tesla-T4")]
    nodes += [NodeState(f"a10-{i}", gpus=4, product="NVIDIA-A10") for i in range(3)]
    t = table_of(*nodes)
    t.set_mix([WorkloadType(1, 1000, 0, 0, 0.8), WorkloadType(1, 1000, 0, 0, 0.2, ("t4",))])
    _, score, _ = evaluate(t, PodRequest(gpus=1), Profile(strategy="BestFit", fragmentation=50))
    assert max(score, key=score.get).startswith("a10")


def test_pinned_shapes_weigh_by_demand_over_the_supply_they_may_use() -> None:
    nodes = [NodeState("t4", gpus=4, product="Tesla-T4")]
    nodes += [NodeState(f"a10-{i}", gpus=4, product="NVIDIA-A10") for i in range(3)]
    t = table_of(*nodes)
    t.set_mix([WorkloadType(1, 1000, 0, 0, 0.8), WorkloadType(1, 1000, 0, 0, 0.2, ("t4",))])
    # unpinned: 0.8 x 16/16 GPUs; T4-pinned: 0.2 x 16/4 GPUs -> 0.8 : 0.8
    assert t._m_p.tolist() == pytest.approx([0.5, 0.5])
    # three more T4 nodes: T4 is no longer scarce (0.8 x 1 : 0.2 x 28/16), and every row is re-weighed
    version = int(t.version[t.rows["a10-0"]])
    for i in range(3):
        t.upsert(NodeState(f"t4-{i}", gpus=4, product="Tesla-T4"))
    assert t._m_p.tolist() == pytest.approx([0.8 / 1.15, 0.35 / 1.15])
    assert t.frag[t.rows["a10-0"]] == pytest.approx(4000 * 0.35 / 1.15)
    assert int(t.version[t.rows["a10-0"]]) != version  # cached answers of unchanged rows are stale too
    t.remove("t4-0")
    t.remove("t4-1")
    t.remove("t4-2")
    assert t._m_p.tolist() == pytest.approx([0.5, 0.5])


def test_without_pinned_shapes_the_weights_are_the_demand_shares() -> None:
    t = table_of(NodeState("t4", gpus=4, product="Tesla-T4"), NodeState("a10", gpus=4, product="NVIDIA-A10"))
    t.set_mix([WorkloadType(1, 1000, 0, 0, 3.0), WorkloadType(1, 500, 0, 0, 1.0)])
    assert t._m_p.tolist() == pytest.approx([0.75, 0.25])


def test_cpu_only_pod_takes_a_node_without_gpus_before_the_cpu_of_a_gpu_node() -> None:
    # The GPU node has one idle GPU and plenty of CPU; the CPU node is half full. Level utilisation used
    # to rank the GPU node first (its GPUs busier than its CPUs); a node without GPUs strands nothing.
    t = table_of(
        NodeState("gpu", gpus=8, gpu_used_milli=[1000] * 7, cpu_milli=64000, cpu_used_milli=8000),
        NodeState("cpu", gpus=0, cpu_milli=32000, cpu_used_milli=16000),
    )
    t.set_mix([WorkloadType(1, 1000, 8000, 0, 1.0)])
    reason, score, _ = evaluate(t, PodRequest(cpu_milli=4000), Profile(fragmentation=50))
    assert reason == {"gpu": 0, "cpu": 0}
    assert score["cpu"] == pytest.approx(100.0 * (40 + 35 + 25 + 50 * 0.5) / 150)
    assert score["cpu"] > score["gpu"]


def stranding_nodes() -> NodeTable:
    # "lean": 8 GPUs, 64 cores, half used, 8 cores left per idle GPU; "rich": 2 GPUs, 104 cores, idle.
    return table_of(
        NodeState("lean", gpus=8, gpu_used_milli=[1000] * 4, cpu_milli=64000, cpu_used_milli=32000),
        NodeState("rich", gpus=2, cpu_milli=104000),
    )


def test_cpu_heavy_gpu_pod_goes_where_it_leaves_each_idle_gpu_its_cpu() -> None:
    # The mix asks 8 cores per GPU. A 1-GPU pod with 24 cores on "lean" leaves 8 cores for 3 idle GPUs:
    # 2 of its 8 GPUs stranded, so its balance counts (3/4)^2; on "rich" every idle GPU keeps its CPU.
    t = stranding_nodes()
    t.set_mix([WorkloadType(1, 1000, 8000, 0, 1.0)])
    _, score, _ = evaluate(t, PodRequest(gpus=1, cpu_milli=24000), Profile(fragmentation=50))
    lean_balance = 100.0 * (1 - (0.875 - 0.625) / 2) * (1 - 2 / 8) ** 2
    assert score["lean"] == pytest.approx((40 * 100 + 35 * 62.5 + 25 * lean_balance + 50 * 50) / 150)
    assert score["rich"] > score["lean"]


def test_without_a_mix_no_gpu_counts_as_stranded() -> None:
    # No workload mix (nothing to say what CPU a GPU needs): level utilisation and best fit pick "lean".
    t = stranding_nodes()
    _, score, _ = evaluate(t, PodRequest(gpus=1, cpu_milli=24000), Profile(fragmentation=50))
    assert score["lean"] > score["rich"]


def test_cache_reuses_until_the_node_changes() -> None:
    t = table_of(NodeState("a", gpus=2), NodeState("b", gpus=2))
    cache = ShapeCache(t)
    rows = np.array([t.rows["a"], t.rows["b"]])
    req = PodRequest(gpus=2)
    r1, _, _ = cache.answer(rows, req, Profile())
    assert r1.tolist() == [core.OK, core.OK]
    t.allocate(t.rows["a"], PodRequest(gpus=1), (0,))
    r2, _, _ = cache.answer(rows, req, Profile())
    assert r2.tolist() == [core.WHOLE, core.OK]


def test_removed_node_row_is_reused_and_unknown() -> None:
    t = table_of(NodeState("a", gpus=1), NodeState("b", gpus=1))
    t.remove("a")
    assert "a" not in t.rows
    t.upsert(NodeState("c", gpus=4))
    assert t.gpu_count[t.rows["c"]] == 4


@settings(max_examples=60, deadline=None)
@given(
    used=st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=8), min_size=1, max_size=6),
    gpus=st.integers(0, 3),
    milli=st.integers(1, 1000),
)
def test_filter_agrees_with_a_direct_count(used: list[list[int]], gpus: int, milli: int) -> None:
    t = NodeTable(max_gpus=8)
    for i, u in enumerate(used):
        t.upsert(NodeState(f"n{i}", gpus=len(u), gpu_used_milli=u))
    req = PodRequest(gpus=max(gpus, 1), gpu_milli=milli if gpus <= 1 else 1000)
    reason, score, _ = t.evaluate(np.arange(len(used)), req, Profile(fragmentation=0))
    for i, u in enumerate(used):
        if req.shared:
            expected = any(1000 - x >= milli for x in u)
        else:
            expected = sum(1 for x in u if x == 0) >= req.gpus
        assert (reason[i] == core.OK) == expected
        assert 0.0 <= score[i] <= 100.0
