"""GPU-set choice equals a brute-force optimum and reproduces (or beats) go-gpuallocator on DGX-1."""

from __future__ import annotations

import random
from itertools import combinations, permutations

import pytest

from kgwe.topology import choice, known

EIGHT_GPU = [n for n in known.names() if known.load(n).size == 8]


def brute_ring(topo, gpus) -> float:
    """Best ring bottleneck by trying every cyclic order (independent of choice's DP)."""
    gpus = sorted(gpus)
    bw = topo.bandwidth_gbps
    if len(gpus) < 2:
        return 0.0
    if len(gpus) == 2:
        return bw[gpus[0]][gpus[1]]
    first, rest = gpus[0], gpus[1:]
    best = 0.0
    for order in permutations(rest):
        ring = (first, *order)
        best = max(best, min(bw[ring[i]][ring[(i + 1) % len(ring)]] for i in range(len(ring))))
    return best


@pytest.fixture(scope="module")
def brute_tables():
    """topology -> {subset: (ring, numa count)} over every subset of its GPUs."""
    out = {}
    for name in [*EIGHT_GPU, "GB200-TRAY"]:
        topo = known.load(name)
        n = topo.size
        table = {}
        for k in range(1, n + 1):
            for subset in combinations(range(n), k):
                table[subset] = (brute_ring(topo, subset), len({topo.gpus[g].numa_node for g in subset}))
        out[name] = table
    return out


@pytest.mark.parametrize("name", [*EIGHT_GPU, "GB200-TRAY"])
def test_choice_equals_brute_force_on_every_free_set(name, brute_tables):
    topo = known.load(name)
    table = brute_tables[name]
    n = topo.size
    for mask in range(1, 1 << n):
        free = frozenset(i for i in range(n) if mask >> i & 1)
        for k in range(1, len(free) + 1):
            got = choice.choose(topo, free, k)
            candidates = [table[s] for s in combinations(sorted(free), k)]
            best_ring = max(r for r, _ in candidates)
            best_numa = min(c for r, c in candidates if r == best_ring)
            assert got is not None and set(got.gpus) <= free and len(got.gpus) == k
            assert got.bottleneck_gbps == best_ring, (name, sorted(free), k, got)
            assert table[got.gpus] == (best_ring, best_numa), (name, sorted(free), k, got)
        assert choice.choose(topo, free, len(free) + 1) is None


def test_sixteen_gpu_node_random_free_sets_match_brute_force():
    topo = known.load("DGX-2")
    rng = random.Random(5)
    for _ in range(6):
        free = frozenset(rng.sample(range(16), rng.randint(4, 12)))
        for k in (2, 3, 4):
            got = choice.choose(topo, free, k)
            best = max(brute_ring(topo, s) for s in combinations(sorted(free), k))
            assert got.bottleneck_gbps == best
            # every pair is fabric NVLink, so NUMA decides: one socket's free GPUs if one has enough
            fits_one_socket = len(free & set(range(8))) >= k or len(free - set(range(8))) >= k
            assert got.numa_local == fits_one_socket


def _sequential(topo, k):
    free = frozenset(g.index for g in topo.gpus)
    out = []
    while (c := choice.choose(topo, free, k)) is not None:
        out.append(set(c.gpus))
        free -= set(c.gpus)
    return out


def test_go_gpuallocator_sequential_expectations_reproduced():
    """docs/facts/topology.md §6: the NV2 pairs, then the socket quads, in this order."""
    v100 = known.load("DGX-1-V100")
    assert _sequential(v100, 2) == [{0, 3}, {1, 2}, {4, 7}, {5, 6}]
    assert _sequential(v100, 4) == [{0, 1, 2, 3}, {4, 5, 6, 7}]
    p100 = known.load("DGX-1-P100")
    assert _sequential(p100, 2) == [{0, 2}, {1, 3}, {4, 6}, {5, 7}]
    assert _sequential(p100, 4) == [{0, 1, 2, 3}, {4, 5, 6, 7}]


@pytest.mark.parametrize(
    "available, required, size, expected",
    [
        ({0, 4, 5, 6}, set(), 2, {5, 6}),
        ({0, 3, 1}, set(), 2, {0, 3}),
        ({0, 1, 4}, set(), 2, {0, 4}),
        (set(range(8)), {4}, 2, {4, 7}),
        (set(range(8)), {4}, 4, {4, 5, 6, 7}),
        (set(range(8)), {0, 2, 4, 6}, 4, {0, 2, 4, 6}),
    ],
)
def test_go_gpuallocator_single_expectations_reproduced(available, required, size, expected):
    got = choice.choose(known.load("DGX-1-V100"), frozenset(available), size, required=frozenset(required))
    assert set(got.gpus) == expected


def test_go_gpuallocator_expectation_beaten_where_kgwe_differs():
    """go-gpuallocator returns {4,5} (NV1, 25 GB/s) for available {0,2,4,5}: it maximises the score of the
    whole partition {0,2}+{4,5}. KGWE maximises the requesting job's ring: {0,4} is NV2 (50 GB/s), twice the
    bandwidth, at the cost of NUMA locality (bandwidth ranks first) and of the leftover pair {2,5} (SYS)."""
    topo = known.load("DGX-1-V100")
    got = choice.choose(topo, frozenset({0, 2, 4, 5}), 2)
    assert set(got.gpus) == {0, 4}
    assert got.bottleneck_gbps == 2 * choice.ring_bottleneck_gbps(topo, (4, 5)) == 50.0
    assert not got.numa_local


@pytest.mark.parametrize("name", ["A100-PCIE-PAIRS-ADJACENT", "A100-PCIE-PAIRS-NONADJACENT", "DGX-1-V100"])
def test_one_gpu_request_does_not_break_an_nvlink_pair(name):
    topo = known.load(name)
    partner = max(range(1, topo.size), key=lambda j: topo.bandwidth_gbps[0][j])
    free = frozenset(range(topo.size)) - {0}
    got = choice.choose(topo, free, 1)
    assert got.gpus == (partner,)  # the GPU whose best partner is already taken


def test_one_gpu_requests_pack_and_leave_pairs_whole():
    topo = known.load("A100-PCIE-PAIRS-NONADJACENT")
    free = frozenset(range(8))
    for _ in range(4):
        free -= set(choice.choose(topo, free, 1).gpus)
    assert sum(1 for a, b in combinations(sorted(free), 2) if topo.has_nvlink(a, b)) == 2


def test_preferences_reorder_the_objective():
    v100 = known.load("DGX-1-V100")
    free = frozenset({0, 2, 4, 5})
    assert set(choice.choose(v100, free, 2, preference="SameNUMA").gpus) in ({0, 2}, {4, 5})
    assert set(choice.choose(v100, free, 2, preference="SamePCIeSwitch").gpus) == {4, 5}  # PIX pair
    with pytest.raises(ValueError, match="unknown topology preference"):
        choice.choose(v100, free, 2, preference="Fastest")


def test_unknown_gpus_and_impossible_requests():
    topo = known.load("HGX-H100")
    assert choice.choose(topo, frozenset({0, 1, 42}), 3) is None
    assert choice.choose(topo, frozenset({0, 1}), 0) is None
    assert choice.choose(topo, frozenset({0, 1}), 1, required=frozenset({2})) is None
    assert choice.choose(topo, frozenset({0, 1}), 1, required=frozenset({0, 1})) is None


def test_node_score_filters_and_ranks():
    h100, l40s = known.load("HGX-H100"), known.load("L40S-8-PCIE")
    everything = frozenset(range(8))
    assert choice.node_score(h100, everything, 8, "NVLinkOptimal") == 100
    assert choice.node_score(l40s, everything, 2, "NVLinkOptimal") <= 50
    assert choice.node_score(l40s, everything, 2, "NVLinkOptimal", min_bandwidth_gbps=100) is None
    assert choice.node_score(h100, everything, 2, "NVLinkOptimal", min_bandwidth_gbps=450) == 100
    assert choice.node_score(h100, everything, 2, "NVLinkOptimal", min_bandwidth_gbps=451) is None
    assert choice.node_score(h100, frozenset({0}), 2) is None
    v100 = known.load("DGX-1-V100")
    whole = choice.node_score(v100, everything, 2)
    fragmented = choice.node_score(v100, frozenset({0, 1, 6}), 2)  # best left is NV1
    assert whole == 100 and fragmented == 50
    numa_ok = choice.node_score(v100, frozenset({4, 5, 6, 7}), 4, "SameNUMA")
    numa_split = choice.node_score(v100, frozenset({0, 1, 4, 5}), 4, "SameNUMA")
    assert numa_ok > numa_split
    pix = choice.node_score(l40s, everything, 2, "SamePCIeSwitch")
    split = choice.node_score(l40s, frozenset({0, 4}), 2, "SamePCIeSwitch")
    assert pix > split
    a100 = known.load("A100-PCIE-PAIRS-ADJACENT")
    keeps_pair = choice.node_score(a100, frozenset({1, 2, 3}), 1)  # GPU1's partner is busy
    breaks_pair = choice.node_score(a100, frozenset({0, 1}), 1)
    assert 0 <= breaks_pair < keeps_pair <= 100
    for pref in choice.PREFERENCES:
        for k in (1, 2, 4, 8):
            s = choice.node_score(v100, everything, k, pref)
            assert s is not None and 0 <= s <= 100


def _random_topology(rng: random.Random, n: int):
    """An irregular node: random direct NVLink counts and PCIe levels (rings are not trivial here)."""
    from kgwe.topology.model import GPU, NodeTopology, Rates

    nv = [[0] * n for _ in range(n)]
    pcie = [["X"] * n for _ in range(n)]
    for i, j in combinations(range(n), 2):
        nv[i][j] = nv[j][i] = rng.choice([0, 0, 0, 1, 2, 4])
        pcie[i][j] = pcie[j][i] = rng.choice(["PIX", "PXB", "PHB", "NODE", "SYS"])
    gpus = tuple(
        GPU(
            index=i,
            uuid=f"GPU-{i}",
            pci_bus_id=f"0:{i}:0.0",
            name="x",
            memory_mib=1,
            numa_node=rng.randint(0, 1),
            cpu_affinity="",
        )
        for i in range(n)
    )
    return NodeTopology(
        name=f"random-{rng.random()}",
        gpus=gpus,
        nvlinks=tuple(map(tuple, nv)),
        pcie=tuple(map(tuple, pcie)),
        rates=Rates(25.0, 24.0, 10.0),
    )


def test_exact_on_irregular_random_topologies():
    rng = random.Random(11)
    for _ in range(25):
        n = rng.randint(4, 8)
        topo = _random_topology(rng, n)
        free = frozenset(rng.sample(range(n), rng.randint(3, n)))
        for k in range(2, len(free) + 1):
            got = choice.choose(topo, free, k)
            best = max(brute_ring(topo, s) for s in combinations(sorted(free), k))
            assert got.bottleneck_gbps == best == brute_ring(topo, got.gpus), (topo.nvlinks, sorted(free), k)
            assert choice.all_nvlink(topo, got.gpus) == _nvlink_ring_exists(topo, got.gpus)


def _nvlink_ring_exists(topo, gpus) -> bool:
    gpus = sorted(gpus)
    if len(gpus) == 2:
        return topo.has_nvlink(*gpus)
    first, rest = gpus[0], gpus[1:]
    return any(
        all(topo.has_nvlink(r[i], r[(i + 1) % len(r)]) for i in range(len(r)))
        for r in ((first, *o) for o in permutations(rest))
    )
