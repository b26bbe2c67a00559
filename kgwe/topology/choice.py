"""Which k of a node's free GPUs to give a request, and how good a node is for it (0..100).

Objective, in order (docs/facts/topology.md §3.4, §6):
1. the estimated ring all-reduce bandwidth of the set: the best Hamiltonian ring's bottleneck link;
2. NUMA locality: fewest distinct NUMA nodes;
3. what stays free is best connected: largest sum of bandwidths over the same-NUMA pairs left free (what
   later NUMA-local requests can use), then over all pairs left. This keeps a 1-GPU request off an intact
   NVLink pair and a 2-GPU request from stranding a weak pair on its socket;
4. the nearest worst-case PCIe level inside the set (e.g. an NVLink pair that also shares a PCIe switch);
5. lowest GPU indices (deterministic).
Preferences reorder the first keys: `SameNUMA` puts locality first, `SamePCIeSwitch` puts the nearest
worst-case PCIe level first; `NVLinkOptimal` and `None` use the order above.

Exact: every k-subset of the free set is scored; the ring bottleneck is exact (threshold search plus a
Hamiltonian-cycle DP over at most 16 GPUs). Fast: per topology, answers are cached by (free bitmask, k,
preference, required bitmask), so a repeated query is a dict lookup. Only plain data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from kgwe.topology.model import PCIE_LEVELS, NodeTopology
from kgwe.vocab import TOPOLOGY_PREFERENCES

PREFERENCES = TOPOLOGY_PREFERENCES
MAX_GPUS = 16
_MAX_TABLES = 512


@dataclass(frozen=True, slots=True)
class Choice:
    """The chosen GPU indices, the ring's bottleneck link in GB/s (0.0 for one GPU: nothing to move),
    whether all chosen GPUs share one NUMA node, and whether the ring runs on NVLink only."""

    gpus: tuple[int, ...]
    bottleneck_gbps: float
    numa_local: bool
    all_nvlink: bool


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _has_hamiltonian_cycle(vertices: list[int], adj: list[int]) -> bool:
    """Is there a cycle through all `vertices` using edges in `adj` (bitmasks over positions)?"""
    c = len(vertices)
    local = {v: k for k, v in enumerate(vertices)}
    ladj = []
    for v in vertices:
        m = 0
        for u in _bits(adj[v]):
            if u in local:
                m |= 1 << local[u]
        ladj.append(m)
    if any(m.bit_count() < 2 for m in ladj):
        return False
    full = (1 << c) - 1
    if all(m == full & ~(1 << k) for k, m in enumerate(ladj)):
        return True  # complete graph
    # dp[s] = bitmask of end vertices of paths that start at vertex 0 and visit exactly the set s
    dp = [0] * (1 << c)
    dp[1] = 1
    for s in range(1, full + 1, 2):
        ends = dp[s]
        while ends:
            low = ends & -ends
            ends ^= low
            nxt = ladj[low.bit_length() - 1] & ~s
            while nxt:
                u = nxt & -nxt
                nxt ^= u
                dp[s | u] |= u
    return bool(dp[full] & ladj[0])


class _Tables:
    """Per-topology precomputation and answer caches, keyed by bitmasks over matrix positions."""

    def __init__(self, topo: NodeTopology) -> None:
        if topo.size > MAX_GPUS:
            raise ValueError(f"GPU-set choice is exact for up to {MAX_GPUS} GPUs, node has {topo.size}")
        n = topo.size
        self.n = n
        self.index = tuple(g.index for g in topo.gpus)
        self.pos = {g.index: p for p, g in enumerate(topo.gpus)}
        self.bw = [list(r) for r in topo.bandwidth_gbps]
        self.numa = [g.numa_node for g in topo.gpus]
        self.level = [[PCIE_LEVELS.get(topo.pcie[i][j], 0) for j in range(n)] for i in range(n)]
        self.nvl = [sum(1 << j for j in range(n) if j != i and topo.has_nvlink(i, j)) for i in range(n)]
        self.full = (1 << n) - 1
        self._ring: dict[int, float] = {}
        self._nvring: dict[int, bool] = {}
        self._pairsum: dict[int, tuple[float, float]] = {0: (0.0, 0.0)}
        self.answers: dict[tuple[object, ...], Choice | None] = {}
        self.scores: dict[tuple[object, ...], int | None] = {}

    def ring(self, mask: int) -> float:
        """Exact best ring bottleneck over the GPUs in `mask`."""
        got = self._ring.get(mask)
        if got is not None:
            return got
        vs = _bits(mask)
        bw = self.bw
        if len(vs) < 2:
            best = 0.0
        elif len(vs) == 2:
            best = bw[vs[0]][vs[1]]
        elif len(vs) == 3:
            a, b, c = vs
            best = min(bw[a][b], bw[a][c], bw[b][c])
        else:
            cap = self.ring_cap(vs)
            best = min(bw[a][b] for a, b in combinations(vs, 2))
            thresholds = {bw[a][b] for a, b in combinations(vs, 2) if best < bw[a][b] <= cap}
            for t in sorted(thresholds, reverse=True):
                adj = [0] * self.n
                for v in vs:
                    adj[v] = sum(1 << u for u in vs if u != v and bw[v][u] >= t)
                if _has_hamiltonian_cycle(vs, adj):
                    best = t
                    break
        self._ring[mask] = best
        return best

    def ring_cap(self, vs: list[int]) -> float:
        """Upper bound on the ring: a ring uses two links at every GPU, so none beats any GPU's
        second-best link inside the set."""
        bw = self.bw
        if len(vs) < 3:
            return self.ring(sum(1 << v for v in vs))
        return min(sorted((bw[v][u] for u in vs if u != v), reverse=True)[1] for v in vs)

    def nvlink_ring(self, mask: int) -> bool:
        got = self._nvring.get(mask)
        if got is None:
            vs = _bits(mask)
            if len(vs) < 2:
                got = False
            elif len(vs) == 2:
                got = bool(self.nvl[vs[0]] >> vs[1] & 1)
            else:
                got = _has_hamiltonian_cycle(vs, self.nvl)
            self._nvring[mask] = got
        return got

    def pairsum(self, mask: int) -> tuple[float, float]:
        """(sum of same-NUMA pair bandwidths, sum of all pair bandwidths) among the GPUs in `mask`."""
        got = self._pairsum.get(mask)
        if got is None:
            low = (mask & -mask).bit_length() - 1
            rest = mask & ~(1 << low)
            numa_sum, bw_sum = self.pairsum(rest)
            for u in _bits(rest):
                bw_sum += self.bw[low][u]
                if self.numa[low] is not None and self.numa[low] == self.numa[u]:
                    numa_sum += self.bw[low][u]
            got = (round(numa_sum, 6), round(bw_sum, 6))
            self._pairsum[mask] = got
        return got

    def numa_count(self, vs: list[int]) -> int:
        return len({self.numa[v] for v in vs})

    def worst_level(self, vs: list[int]) -> int:
        return max((self.level[a][b] for a, b in combinations(vs, 2)), default=0)

    def best(self, free: int, k: int, preference: str, required: int) -> Choice | None:
        key = (free, k, preference, required)
        if key in self.answers:
            return self.answers[key]
        answer = self._search(free, k, preference, required)
        self.answers[key] = answer
        return answer

    def _search(self, free: int, k: int, preference: str, required: int) -> Choice | None:
        if k <= 0 or (free & required) != required or required.bit_count() > k or free.bit_count() < k:
            return None
        must = _bits(required)
        rest = _bits(free & ~required)
        best_key: tuple[Any, ...] | None = None  # ring (a pair), NUMA, pairs left, level: by preference
        best_set: list[int] = []
        ring_first = preference not in ("SameNUMA", "SamePCIeSwitch")
        for extra in combinations(rest, k - len(must)):
            vs = sorted(must + list(extra))
            mask = sum(1 << v for v in vs)
            if (
                ring_first
                and best_key is not None
                and mask not in self._ring
                and self.ring_cap(vs) < best_key[0]
            ):
                continue  # cannot beat the best ring found so far
            ring = self.ring(mask)
            numa = -self.numa_count(vs)
            left = self.pairsum(free & ~mask)
            level = -self.worst_level(vs)
            key: tuple[Any, ...]
            if preference == "SameNUMA":
                key = (numa, ring, left, level)
            elif preference == "SamePCIeSwitch":
                key = (level, ring, numa, left)
            else:
                key = (ring, numa, left, level)
            if best_key is None or key > best_key:
                best_key, best_set = key, vs
        mask = sum(1 << v for v in best_set)
        numa_nodes = {self.numa[v] for v in best_set}
        return Choice(
            gpus=tuple(self.index[v] for v in best_set),
            bottleneck_gbps=self.ring(mask),
            numa_local=len(numa_nodes) == 1 and (k == 1 or None not in numa_nodes),
            all_nvlink=self.nvlink_ring(mask),
        )


_TABLES: dict[str, _Tables] = {}


def _tables(topo: NodeTopology) -> _Tables:
    t = _TABLES.get(topo.key)
    if t is None:
        if len(_TABLES) >= _MAX_TABLES:
            with contextlib.suppress(StopIteration, RuntimeError, KeyError):  # another thread got there first
                _TABLES.pop(next(iter(_TABLES)))
        t = _TABLES[topo.key] = _Tables(topo)
    return t


def _mask(t: _Tables, gpus: Iterable[int]) -> int:
    pos = t.pos
    m = 0
    for g in gpus:
        p = pos.get(g)
        if p is not None:  # a GPU the topology does not know cannot be given out
            m |= 1 << p
    return m


def choose(
    topo: NodeTopology,
    free: frozenset[int],
    k: int,
    *,
    preference: str = "None",
    required: frozenset[int] = frozenset(),
) -> Choice | None:
    """The best k GPUs (by index) among `free`, always including `required`; None if impossible."""
    if preference not in PREFERENCES:
        raise ValueError(f"unknown topology preference {preference!r}; use one of {', '.join(PREFERENCES)}")
    t = _tables(topo)
    req = _mask(t, required)
    if req.bit_count() != len(required):
        return None
    return t.best(_mask(t, free), k, preference, req)


def ring_bottleneck_gbps(topo: NodeTopology, gpus: frozenset[int] | tuple[int, ...]) -> float:
    """Exact best ring bottleneck (GB/s) over exactly these GPUs; 0.0 for fewer than two."""
    t = _tables(topo)
    return t.ring(_mask(t, gpus))


def all_nvlink(topo: NodeTopology, gpus: frozenset[int] | tuple[int, ...]) -> bool:
    """Can these GPUs form a ring over NVLink (direct or fabric) only?"""
    t = _tables(topo)
    return t.nvlink_ring(_mask(t, gpus))


_LEVEL_POINTS = {0: 100, 10: 100, 20: 80, 30: 60, 40: 40, 50: 20}


def node_score(
    topo: NodeTopology,
    free: frozenset[int],
    k: int,
    preference: str = "None",
    min_bandwidth_gbps: float | None = None,
) -> int | None:
    """0..100: how well this node's free GPUs serve a k-GPU request; None when the node cannot take it
    (too few free GPUs) or its best set is below `min_bandwidth_gbps` (a hard filter, k >= 2 only).

    Bandwidth is scored against the best this node offers for k when all its GPUs are free, so a node
    that can still give its best set scores 100 and a fragmented one scores lower. `NVLinkOptimal` and
    `SameNUMA` put half the score on an all-NVLink / single-NUMA set; `SamePCIeSwitch` on the worst
    PCIe level inside the set. For one GPU (nothing to move) the score is how little NVLink/PCIe
    bandwidth among the remaining free GPUs the pick destroys, which packs 1-GPU pods onto GPUs whose
    partners are already busy.
    """
    if preference not in PREFERENCES:
        raise ValueError(f"unknown topology preference {preference!r}; use one of {', '.join(PREFERENCES)}")
    t = _tables(topo)
    free_mask = _mask(t, free)
    key = (free_mask, k, preference, min_bandwidth_gbps)
    if key in t.scores:
        return t.scores[key]
    score = _score(t, free_mask, k, preference, min_bandwidth_gbps)
    t.scores[key] = score
    return score


def _score(t: _Tables, free: int, k: int, preference: str, min_bandwidth_gbps: float | None) -> int | None:
    c = t.best(free, k, preference, 0)
    if c is None:
        return None
    if k >= 2 and min_bandwidth_gbps is not None and c.bottleneck_gbps < min_bandwidth_gbps:
        return None
    if k == 1:
        v = t.pos[c.gpus[0]]
        lost = sum(t.bw[v][u] for u in _bits(free & ~(1 << v)))
        worst = max(sum(t.bw[w][u] for u in range(t.n) if u != w) for w in range(t.n)) or 1.0
        return max(0, min(100, round(100 * (1 - lost / worst))))
    ideal = t.best(t.full, k, "None", 0)
    ratio = c.bottleneck_gbps / ideal.bottleneck_gbps if ideal and ideal.bottleneck_gbps else 1.0
    if preference == "NVLinkOptimal":
        raw = 50 * c.all_nvlink + 50 * ratio
    elif preference == "SameNUMA":
        raw = 50 * c.numa_local + 50 * ratio
    elif preference == "SamePCIeSwitch":
        vs = [t.pos[g] for g in c.gpus]
        raw = 0.5 * _LEVEL_POINTS[t.worst_level(vs)] + 50 * ratio
    else:
        raw = 100 * ratio
    return max(0, min(100, round(raw)))
