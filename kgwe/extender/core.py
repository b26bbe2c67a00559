"""The scoring core: filter and score pods against a columnar table of nodes. Pure: no I/O, no clock.

The extender and `kgwe simulate` both run THIS code. Nodes are kept as numpy columns (GPU share free per
physical GPU, CPU/memory free, MIG instances free, model/product ids) so one request is answered for
thousands of nodes with a handful of vector operations, and per-node answers are cached per request shape:
each row carries a version that changes whenever the node changes, and a cached answer is reused while the
row's version is the one it was computed at. Placing or releasing a pod bumps one row only.

Scores are floats 0..100 (the extender maps them to kube-scheduler's 0..10):
  total = (wT*topology + wR*resource + wB*balance + wF*fragmentation) / (wT + wR + wB + wF)
- topology: kgwe.topology.choice's GPU-set score for multi-GPU pods (NVLink pairs etc.), 100 otherwise.
- resource: the profile's strategy (BinPack, BestFit, Spread, LeastLoaded, CostOptimized, Priority,
  RoundRobin, Random).
- balance: GPU vs CPU/memory utilisation after placement kept level (a GPU node whose CPUs are gone
  strands its GPUs; CPU-only pods fill nodes without GPUs first), times (1 - the share of the node's GPUs
  left idle without the CPU the mix asks per GPU) squared.
- fragmentation: FGD (Weng et al., ATC'23): expected GPU share made unusable for the recent mix of request
  shapes, before vs after the placement; smaller increase = higher score.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from cachetools import LRUCache

from kgwe.extender.nodes import UNLIMITED, NodeState
from kgwe.extender.profile import Profile
from kgwe.extender.replicas import on_replicated
from kgwe.extender.request import PodRequest
from kgwe.topology.model import NodeTopology

# Fragmentation change (milli) that moves the FGD term from 50 to 0 (or 100): one GPU's worth.
FRAG_SCALE_MILLI = 1000.0
# How far (L1) pinned shapes' pressure weights may drift as nodes come and go before every row's
# fragmentation is recomputed with the new ones.
PRESSURE_DRIFT = 0.02
_ALL_ACCESS = np.ones((1, 1), dtype=np.bool_)


class Reason(IntEnum):
    """Why a node failed a pod (per row, as int8); `describe` gives the sentence `kubectl describe pod`
    shows. OK = the node passed."""

    OK = 0
    NO_GPU = 1
    PRODUCT = 2
    FAMILY = 3
    MEMORY = 4
    WHOLE = 5
    SHARE = 6
    MIG = 7
    CPU = 8
    RAM = 9
    TOPOLOGY = 10
    NO_TOPOLOGY = 11


# Plain ints for the array code: an IntEnum operand makes each numpy comparison or assignment look its hooks
# up on the enum class (8 us instead of 3 per filter step on one row). Equal to the Reason members.
OK, NO_GPU, PRODUCT, FAMILY, MEMORY, WHOLE, SHARE, MIG, CPU, RAM, TOPOLOGY, NO_TOPOLOGY = map(int, Reason)

TopologyScorer = Callable[[NodeTopology, frozenset[int], int, str, "float | None"], "float | None"]


@dataclass(frozen=True)
class _Rows:
    """The columns of the rows one request is evaluated on, gathered once."""

    rows: np.ndarray
    free: np.ndarray  # (n, G) share free per physical GPU, milli
    count: np.ndarray
    cpu: np.ndarray
    mem: np.ndarray

    @property
    def whole_free(self) -> np.ndarray:
        out: np.ndarray = (self.free == 1000).sum(axis=1)
        return out


def _combine(
    profile: Profile, topo: np.ndarray, resource: np.ndarray, balance: np.ndarray, delta: np.ndarray | None
) -> np.ndarray:
    """The weighted mean of the score terms; the fragmentation term counts only when it was computed."""
    parts = profile.topology * topo + profile.resource * resource + profile.balance * balance
    weights = profile.topology + profile.resource + profile.balance
    if delta is not None:
        frag_score = np.clip(50.0 - 50.0 * delta / FRAG_SCALE_MILLI, 0.0, 100.0)
        parts = parts + profile.fragmentation * frag_score
        weights += profile.fragmentation
    return parts / max(weights, 1e-9)


@dataclass(frozen=True)
class WorkloadType:
    """One request shape of the target workload the fragmentation term protects (FGD's 'typical pods')."""

    gpus: int
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    weight: float
    # GPU products the shape is pinned to (matched like a request's products): a node of another product
    # is no use to it, so all its idle GPU share counts as fragment for this shape (FGD's "no access").
    products: tuple[str, ...] = ()


class NodeTable:
    """Columnar node state. Rows are reused after removal; `version[row]` changes on every change."""

    def __init__(self, max_gpus: int = 8, capacity: int = 64) -> None:
        self.G = max_gpus
        self.cap = 0
        self.rows: dict[str, int] = {}
        self.names: list[str | None] = []
        self.free_rows: list[int] = []
        self.nodes: list[NodeState | None] = []
        self.mig_names: dict[str, int] = {}
        self._products: dict[str, int] = {}
        self._families: dict[str, int] = {}
        self.product_names: list[str] = []
        self.family_names: list[str] = []
        self._clock = 0
        self.layout = 0  # bumped whenever a name gets or loses a row
        self.mix: tuple[WorkloadType, ...] = ()
        self._m_cpu_per_gpu = 0.0
        self._topo_memo: dict[tuple[object, ...], tuple[object, float | None]] = {}
        self._alloc(capacity)

    # ---- storage -------------------------------------------------------------------------------------
    def _alloc(self, cap: int) -> None:
        old = self.cap

        def grow(arr: np.ndarray | None, shape: tuple[int, ...], fill: float, dtype: type) -> np.ndarray:
            new: np.ndarray = np.full(shape, fill, dtype=dtype)
            if arr is not None and old:
                new[tuple(slice(0, s) for s in arr.shape)] = arr
            return new

        g = getattr
        self.gpu_free = grow(g(self, "gpu_free", None), (cap, self.G), -1, np.int32)
        self.gpu_count = grow(g(self, "gpu_count", None), (cap,), 0, np.int32)
        self.replicas = grow(g(self, "replicas", None), (cap,), 1, np.int32)
        self.cpu_free = grow(g(self, "cpu_free", None), (cap,), 0, np.int64)
        self.cpu_cap = grow(g(self, "cpu_cap", None), (cap,), 1, np.int64)
        self.mem_free = grow(g(self, "mem_free", None), (cap,), 0, np.int64)
        self.mem_cap = grow(g(self, "mem_cap", None), (cap,), 1, np.int64)
        self.gpu_mem = grow(g(self, "gpu_mem", None), (cap,), 0, np.int64)
        self.product_id = grow(g(self, "product_id", None), (cap,), -1, np.int32)
        self.family_id = grow(g(self, "family_id", None), (cap,), -1, np.int32)
        self.priority = grow(g(self, "priority", None), (cap,), 0.0, np.float64)
        self.version = grow(g(self, "version", None), (cap,), 0, np.int64)
        self.live = grow(g(self, "live", None), (cap,), False, np.bool_)
        self.frag = grow(g(self, "frag", None), (cap,), 0.0, np.float64)
        self.mig_free = grow(g(self, "mig_free", None), (cap, max(1, len(self.mig_names))), 0, np.int32)
        self.names.extend([None] * (cap - old))
        self.nodes.extend([None] * (cap - old))
        self.free_rows.extend(range(cap - 1, old - 1, -1))
        self.cap = cap

    def _intern(self, table: dict[str, int], names: list[str], value: str) -> int:
        if not value:
            return -1
        key = value.lower()
        if key not in table:
            table[key] = len(names)
            names.append(key)
        return table[key]

    def _mig_col(self, profile: str) -> int:
        if profile not in self.mig_names:
            self.mig_names[profile] = len(self.mig_names)
            if len(self.mig_names) > self.mig_free.shape[1]:
                extra = np.zeros((self.cap, len(self.mig_names) - self.mig_free.shape[1]), dtype=np.int32)
                self.mig_free = np.concatenate([self.mig_free, extra], axis=1)
        return self.mig_names[profile]

    @property
    def generation(self) -> int:
        """Changes whenever any row changes (every write bumps a row's version from this clock)."""
        return self._clock

    def _bump(self, row: int) -> None:
        self._clock += 1
        self.version[row] = self._clock

    # ---- node updates ----------------------------------------------------------------------------------
    def upsert(self, node: NodeState) -> int:
        """Insert or replace a node's full state; returns its row."""
        if node.gpus > self.G:
            raise ValueError(f"node {node.name}: {node.gpus} GPUs exceeds the table's {self.G}")
        row = self.rows.get(node.name)
        before = None if row is None else (int(self.product_id[row]), int(self.gpu_count[row]))
        if row is None:
            if not self.free_rows:
                self._alloc(self.cap * 2)
            row = self.free_rows.pop()
            self.layout += 1  # name -> row mapping changed
            self.rows[node.name] = row
            self.names[row] = node.name
        self.nodes[row] = node
        self.gpu_free[row] = -1
        self.gpu_free[row, : node.gpus] = [max(0, 1000 - u) for u in node.gpu_used_milli]
        self.gpu_count[row] = node.gpus
        self.replicas[row] = max(1, node.replicas)
        self.cpu_cap[row] = max(1, node.cpu_milli)
        self.cpu_free[row] = node.cpu_milli - node.cpu_used_milli
        self.mem_cap[row] = max(1, node.memory_mib)
        self.mem_free[row] = node.memory_mib - node.memory_used_mib
        self.gpu_mem[row] = node.gpu_memory_mib
        self.product_id[row] = self._intern(self._products, self.product_names, node.product or node.model)
        self.family_id[row] = self._intern(self._families, self.family_names, node.family)
        self.priority[row] = node.priority
        self.mig_free[row] = 0
        for prof, n in node.mig_free.items():
            col = self._mig_col(prof)  # may widen self.mig_free: look the array up after
            self.mig_free[row, col] = n
        self.live[row] = True
        self._refresh_frag(np.array([row]))
        self._bump(row)
        if before != (int(self.product_id[row]), int(self.gpu_count[row])):
            self._supply_changed()
        return row

    def remove(self, name: str) -> None:
        row = self.rows.pop(name, None)
        if row is None:
            return
        self.layout += 1
        self.live[row] = False
        self.names[row] = None
        self.nodes[row] = None
        self.gpu_free[row] = -1
        self._bump(row)
        self.free_rows.append(row)
        if self.gpu_count[row]:
            self._supply_changed()

    def allocate(self, row: int, req: PodRequest, gpu_indices: Sequence[int], sign: int = 1) -> None:
        """Account a bound pod (sign=+1) or its departure (sign=-1) on the GPUs it holds."""
        req = on_replicated(req, int(self.replicas[row]))
        for i in gpu_indices:
            v = int(self.gpu_free[row, i]) - sign * req.gpu_milli
            self.gpu_free[row, i] = min(1000, max(0, v))
        self.cpu_free[row] -= sign * req.cpu_milli
        self.mem_free[row] -= sign * req.memory_mib
        for prof, n in req.mig:
            col = self._mig_col(prof)
            self.mig_free[row, col] = max(0, int(self.mig_free[row, col]) - sign * n)
        self._refresh_frag(np.array([row]))
        self._bump(row)

    def choose_gpus(self, row: int, req: PodRequest, hint: int = -1) -> tuple[int, ...]:
        """The physical GPUs a pod would take on this row (hint = the scorer's best GPU for a share)."""
        req = on_replicated(req, int(self.replicas[row]))
        free = self.gpu_free[row]
        if req.gpus == 0:
            return ()
        if req.shared:
            if hint >= 0 and free[hint] >= req.gpu_milli:
                return (int(hint),)
            fits = np.where(free >= req.gpu_milli, free, 10**6)
            return (int(np.argmin(fits)),)
        whole = [i for i in range(int(self.gpu_count[row])) if free[i] == 1000]
        node = self.nodes[row]
        topo = node.topology if node is not None else None
        if topo is not None and req.gpus >= 2 and self.topology_chooser is not None:
            picked = self.topology_chooser(topo, frozenset(whole), req.gpus)
            if picked:
                return tuple(picked)
        return tuple(whole[: req.gpus])

    topology_scorer: TopologyScorer | None = None
    topology_chooser: Callable[[NodeTopology, frozenset[int], int], Sequence[int] | None] | None = None

    # ---- fragmentation (FGD) -----------------------------------------------------------------------------
    def set_mix(self, mix: Iterable[WorkloadType]) -> None:
        """Set the workload mix the fragmentation term protects and recompute every row's fragmentation."""
        items = tuple(t for t in mix if t.gpus > 0 and t.weight > 0)
        total = sum(t.weight for t in items) or 1.0
        self.mix = tuple(
            WorkloadType(t.gpus, t.gpu_milli, t.cpu_milli, t.memory_mib, t.weight / total, t.products)
            for t in items
        )
        self._m_access_by_product = np.ones((0, len(self.mix)), dtype=np.bool_)
        self._m_need = np.array([t.gpu_milli if t.gpus == 1 else 1000 for t in self.mix], dtype=np.int32)
        self._m_k = np.array([t.gpus for t in self.mix], dtype=np.int32)
        self._m_cpu = np.array([t.cpu_milli for t in self.mix], dtype=np.int64)
        self._m_mem = np.array([t.memory_mib for t in self.mix], dtype=np.int64)
        self._m_demand = np.array([t.weight for t in self.mix], dtype=np.float64)
        self._m_pinned = any(t.products for t in self.mix)
        self._set_pressure(self._pressure_weights())
        self._refresh_all_frag()

    def _refresh_all_frag(self) -> None:
        live = np.nonzero(self.live)[0]
        if len(live):
            self._refresh_frag(live)
            self.version[live] = self._clock + 1 + np.arange(len(live))
            self._clock += len(live)

    def _access_by_product(self) -> np.ndarray:
        """(products + 1, M): whether shape m may use a node of product p (row 0: a node without one)."""
        known = self._m_access_by_product
        if known.shape[0] != len(self.product_names) + 1:
            known = np.ones((len(self.product_names) + 1, len(self.mix)), dtype=np.bool_)
            for m, t in enumerate(self.mix):
                if t.products:  # the products filter's own matching rule (_ids)
                    known[:, m] = False
                    known[self._ids(self.product_names, t.products) + 1, m] = True
            self._m_access_by_product = known
        return known

    def _mix_access(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows), M): which shapes of the mix may use each row's GPUs at all (product pins); without
        pinned shapes every row is open to every shape, and a (1, 1) True broadcasts so on the hot path."""
        if not self._m_pinned:
            return _ALL_ACCESS
        out: np.ndarray = self._access_by_product()[self.product_id[rows] + 1]
        return out

    def _pressure_weights(self) -> np.ndarray:
        """Each shape's weight in the expected fragment: its share of the demand times how scarce the GPUs
        it may use are (all GPUs / GPUs of the products it is pinned to), renormalised. A shape pinned to a
        quarter of the fleet asks four times as much of each of its GPUs as an unpinned shape of the same
        frequency, so share it cannot use on those GPUs costs four times as much (FGD weighs by frequency
        alone and lets unpinned pods take the scarce products that pinned pods then find full). Without
        pinned shapes this is the demand share itself."""
        if not (self.mix and self._m_pinned):
            return self._m_demand
        live = np.nonzero(self.live)[0]
        gpus = np.bincount(
            self.product_id[live] + 1,
            weights=self.gpu_count[live].astype(np.float64),
            minlength=len(self.product_names) + 1,
        )
        usable = gpus @ self._access_by_product()  # (M,) GPUs each shape may use
        scarcity = np.where(usable > 0, gpus.sum() / np.maximum(usable, 1.0), 1.0)
        weights = self._m_demand * scarcity
        out: np.ndarray = weights / weights.sum()
        return out

    def _set_pressure(self, weights: np.ndarray) -> None:
        """The shapes' weights in the expected fragment, and the CPU per GPU (milli) the mix so weighted
        asks (what `_stranded` leaves each idle GPU; 0 without a mix: no stranding counted)."""
        self._m_p = weights
        self._m_cpu_per_gpu = float((self._m_cpu / self._m_k) @ weights) if len(weights) else 0.0

    def _supply_changed(self) -> None:
        """Nodes came, went or changed product/GPU count: re-weigh pinned shapes once the weights have
        drifted (L1 > PRESSURE_DRIFT) from those the rows' fragmentation was computed with."""
        if not (self.mix and self._m_pinned):
            return
        weights = self._pressure_weights()
        if np.abs(weights - self._m_p).sum() > PRESSURE_DRIFT:
            self._set_pressure(weights)
            self._refresh_all_frag()

    def _frag_of(self, free: np.ndarray, cpu: np.ndarray, mem: np.ndarray, access: np.ndarray) -> np.ndarray:
        """Expected fragment (milli) of GPU states free[..., G] for the mix; leading dims are broadcast.
        `access[..., M]`: whether shape m may use the node at all."""
        if not self.mix:
            return np.zeros(free.shape[:-1])
        f = free[..., None]  # (..., G, 1)
        need = self._m_need  # (M,)
        usable = f >= need  # (..., G, M)
        idle = np.maximum(free, 0)
        # (..., M): idle share that a type-m pod cannot use
        small = np.where(usable, 0, np.maximum(f, 0)).sum(axis=-2)
        fits = usable.sum(axis=-2) >= self._m_k
        fits &= (cpu[..., None] >= self._m_cpu) & (mem[..., None] >= self._m_mem) & access
        total = idle.sum(axis=-1)[..., None]
        out: np.ndarray = np.where(fits, small, total) @ self._m_p
        return out

    def _refresh_frag(self, rows: np.ndarray) -> None:
        if self.mix:
            self.frag[rows] = self._frag_of(
                self.gpu_free[rows], self.cpu_free[rows], self.mem_free[rows], self._mix_access(rows)
            )

    # ---- filter + score --------------------------------------------------------------------------------
    def evaluate(
        self, rows: np.ndarray, req: PodRequest, profile: Profile
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(reason codes, scores 0..100, best GPU index for shares) for `rows`. Pure function of the rows.

        Rows whose GPUs the device plugin replicates see the request as the share it holds there
        (kgwe.extender.replicas); each group of equal replicas is answered at once."""
        reps = self.replicas[rows]
        if not req.gpus or not (reps > 1).any():
            return self._evaluate(rows, req, profile)
        reason = np.zeros(len(rows), dtype=np.int8)
        score = np.zeros(len(rows), dtype=np.float64)
        best = np.full(len(rows), -1, dtype=np.int8)
        for r in np.unique(reps).tolist():
            sel = reps == r
            reason[sel], score[sel], best[sel] = self._evaluate(rows[sel], on_replicated(req, r), profile)
        return reason, score, best

    def _evaluate(
        self, rows: np.ndarray, req: PodRequest, profile: Profile
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(rows)
        view = _Rows(
            rows, self.gpu_free[rows], self.gpu_count[rows], self.cpu_free[rows], self.mem_free[rows]
        )
        score = np.zeros(n, dtype=np.float64)
        best = np.full(n, -1, dtype=np.int8)
        reason = self._filter(view, req)
        topo = np.full(n, 100.0)
        if self._wants_topology(req, profile):
            topo_reason, topo = self._topology_term(view, req, reason == OK)
            reason[reason == OK] = topo_reason[reason == OK]
        idx = np.nonzero(reason == OK)[0]
        if not len(idx):
            return reason, score, best
        f = view.free[idx]
        c = view.count[idx].astype(np.float64)
        left_on_gpu = None
        if req.shared:
            best[idx], left_on_gpu, delta = self._share_placement(view, idx, req, profile)
        else:
            delta = self._fragmentation_delta(view, idx, req, profile)
        cap_milli = np.maximum(c * 1000.0, 1.0)
        used_after = (cap_milli - np.maximum(f, 0).sum(axis=1) + req.gpu_milli_total) / cap_milli
        used_after = np.where(c > 0, used_after, 0.0)
        resource = self._resource(
            profile, req, rows[idx], f, view.whole_free[idx], c, used_after, left_on_gpu
        )
        balance = self._balance_term(view, idx, req, used_after)
        score[idx] = _combine(profile, topo[idx], resource, balance, delta)
        return reason, score, best

    # Filters in the order a node's reason is decided: the first that fails names it. Each gives a mask of
    # the rows it rejects, or None when the request does not ask what it checks.
    def _filter(self, view: _Rows, req: PodRequest) -> np.ndarray:
        reason = np.zeros(len(view.rows), dtype=np.int8)
        for code, check in self._FILTERS:
            mask = check(self, view, req)
            if mask is not None:
                reason[(reason == OK) & mask] = code
        return reason

    def _not_live(self, view: _Rows, req: PodRequest) -> np.ndarray | None:
        out: np.ndarray = ~self.live[view.rows]
        return out

    def _no_gpus(self, view: _Rows, req: PodRequest) -> np.ndarray | None:
        return view.count == 0 if req.wants_gpu and not req.mig else None

    def _wrong_product(self, view: _Rows, req: PodRequest) -> np.ndarray | None:
        if not (req.wants_gpu and req.products):
            return None
        return ~np.isin(self.product_id[view.rows], self._ids(self.product_names, req.products))

    def _wrong_family(self, view: _Rows, req: PodRequest) -> np.ndarray | None:
        if not (req.wants_gpu and req.families):
            return None
        return ~np.isin(self.family_id[view.rows], self._ids(self.family_names, req.families))

    def _too_little_gpu_memory(self, view: _Rows, req: PodRequest) -> np.ndarray | None:
        if not (req.wants_gpu and req.min_memory_mib):
            return None
        out: np.ndarray = self.gpu_mem[view.rows] < req.min_memory_mib
        return out

    def _too_few_whole_gpus(self, view: _Rows, req: PodRequest) -> np.ndarray | None:
        return view.whole_free < req.gpus if req.gpus and not req.shared else None

    def _no_gpu_share(self, view: _Rows, req: PodRequest) -> np.ndarray | None:
        return ~np.any(view.free >= req.gpu_milli, axis=1) if req.shared else None

    def _too_few_mig_instances(self, view: _Rows, req: PodRequest) -> np.ndarray | None:
        short: np.ndarray | None = None
        for prof, k in req.mig:
            col = self.mig_names.get(prof)
            have = (
                self.mig_free[view.rows, col] if col is not None else np.zeros(len(view.rows), dtype=np.int32)
            )
            short = (have < k) if short is None else short | (have < k)
        return short

    def _too_little_cpu(self, view: _Rows, req: PodRequest) -> np.ndarray | None:
        return view.cpu < req.cpu_milli if req.cpu_milli else None

    def _too_little_memory(self, view: _Rows, req: PodRequest) -> np.ndarray | None:
        return view.mem < req.memory_mib if req.memory_mib else None

    _FILTERS: tuple[tuple[int, Callable[[NodeTable, _Rows, PodRequest], np.ndarray | None]], ...] = (
        (NO_GPU, _not_live),
        (NO_GPU, _no_gpus),
        (PRODUCT, _wrong_product),
        (FAMILY, _wrong_family),
        (MEMORY, _too_little_gpu_memory),
        (WHOLE, _too_few_whole_gpus),
        (SHARE, _no_gpu_share),
        (MIG, _too_few_mig_instances),
        (CPU, _too_little_cpu),
        (RAM, _too_little_memory),
    )

    # Score terms, each 0..100 for the rows that passed the filters.
    @staticmethod
    def _wants_topology(req: PodRequest, profile: Profile) -> bool:
        return req.gpus >= 2 and (
            req.min_bandwidth_gbps is not None or req.preference != "None" or profile.topology > 0
        )

    def _topology_term(self, view: _Rows, req: PodRequest, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(reason: OK, TOPOLOGY or NO_TOPOLOGY; topology score) of the `ok` rows' best idle GPU set. Scores
        depend only on (topology, idle-GPU bitmask, request), so they are memoised across nodes."""
        n = len(view.rows)
        reason = np.zeros(n, dtype=np.int8)
        topo = np.full(n, 100.0)
        masks = ((view.free == 1000) * (1 << np.arange(self.G))).sum(axis=1).tolist()
        memo = self._topo_memo
        if len(memo) > 100_000:
            memo.clear()
        want = (req.gpus, req.preference, req.min_bandwidth_gbps)
        for i in np.nonzero(ok)[0].tolist():
            node = self.nodes[int(view.rows[i])]
            if node is None or node.topology is None or self.topology_scorer is None:
                if req.min_bandwidth_gbps is not None:
                    reason[i] = NO_TOPOLOGY
                else:
                    topo[i] = 50.0
                continue
            key = (id(node.topology), masks[i], want)
            hit = memo.get(key)
            if hit is None or hit[0] is not node.topology:
                idle = frozenset(j for j in range(self.G) if masks[i] >> j & 1)
                hit = memo[key] = (
                    node.topology,
                    self.topology_scorer(
                        node.topology, idle, req.gpus, req.preference, req.min_bandwidth_gbps
                    ),
                )
            s = hit[1]
            if s is None:
                reason[i] = TOPOLOGY
            else:
                topo[i] = float(s)
        return reason, topo

    def _share_placement(
        self, view: _Rows, idx: np.ndarray, req: PodRequest, profile: Profile
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(GPU a shared pod would take, share left on it, fragmentation increase or None). With the
        fragmentation term on, the GPU that adds least fragment (FGD); otherwise best fit."""
        f = view.free[idx]
        cand = f >= req.gpu_milli
        delta = None
        if self.mix and profile.fragmentation > 0:
            after = np.repeat(f[:, None, :], self.G, axis=1)  # (k, G candidates, G)
            g_idx = np.arange(self.G)
            after[:, g_idx, g_idx] -= req.gpu_milli
            fr = self._frag_of(
                after,
                (view.cpu[idx] - req.cpu_milli)[:, None],
                (view.mem[idx] - req.memory_mib)[:, None],
                self._mix_access(view.rows[idx])[:, None, :],  # (k, 1, M), or (1, 1, 1) broadcast
            )
            fr = np.where(cand, fr, np.inf)
            b = np.argmin(fr, axis=1)
            delta = fr[np.arange(len(idx)), b] - self.frag[view.rows[idx]]
        else:
            b = np.argmin(np.where(cand, f, 10**6), axis=1)
        return b, f[np.arange(len(idx)), b] - req.gpu_milli, delta

    def _fragmentation_delta(
        self, view: _Rows, idx: np.ndarray, req: PodRequest, profile: Profile
    ) -> np.ndarray | None:
        """FGD: how much GPU share placing a non-shared pod makes unusable for the workload mix."""
        if not (self.mix and profile.fragmentation > 0):
            return None
        f = view.free[idx]
        if req.gpus:
            f = f.copy()
            # taking k idle GPUs: which ones does not change the multiset beyond "k fewer 1000s"
            order = np.argsort(f != 1000, axis=1, kind="stable")[:, : req.gpus]
            np.put_along_axis(f, order, 0, axis=1)
        rows = view.rows[idx]
        fr = self._frag_of(
            f, view.cpu[idx] - req.cpu_milli, view.mem[idx] - req.memory_mib, self._mix_access(rows)
        )
        out: np.ndarray = fr - self.frag[rows]
        return out

    def _balance_term(
        self, view: _Rows, idx: np.ndarray, req: PodRequest, used_after: np.ndarray
    ) -> np.ndarray:
        """GPU vs CPU/memory utilisation after placement kept level (a GPU node whose CPUs are gone strands
        its GPUs); for CPU-only pods, CPU kept on GPU nodes for the GPU pods that will need it (a node
        without GPUs strands nothing: 100). Times (1 - the share of the node's GPUs left idle without the
        CPU the workload mix asks per GPU, `_stranded`) squared: stranding a quarter of a node's GPUs costs
        44% of its balance, half of them 75%."""
        rows = view.rows[idx]
        cpu_cap = self.cpu_cap[rows]
        mem_cap = self.mem_cap[rows]
        cpu_used = np.where(cpu_cap < UNLIMITED, 1 - (view.cpu[idx] - req.cpu_milli) / cpu_cap, used_after)
        mem_used = np.where(mem_cap < UNLIMITED, 1 - (view.mem[idx] - req.memory_mib) / mem_cap, used_after)
        if req.gpus:
            out: np.ndarray = 100.0 * (
                1.0 - (np.abs(used_after - cpu_used) + np.abs(used_after - mem_used)) / 2
            )
        else:
            out = np.where(view.count[idx] > 0, 100.0 * (1.0 - np.clip(cpu_used - used_after, 0, 1)), 100.0)
        if self._m_cpu_per_gpu > 0:
            out = out * (1.0 - self._stranded(view, idx, req, used_after)) ** 2
        return out

    def _stranded(self, view: _Rows, idx: np.ndarray, req: PodRequest, used_after: np.ndarray) -> np.ndarray:
        """Share (0..1) of each node's GPUs that would be idle after the placement with no CPU left to run
        them: idle GPUs beyond CPU left / the mix's CPU per GPU. FGD counts a GPU whose node lacks the CPU
        a typical pod asks as fragment; this counts how many GPUs the CPU left can still feed, so the
        placement that eats the CPU of many idle GPUs (a CPU-heavy pod on a node with little CPU per GPU)
        ranks below one that leaves each idle GPU its CPU."""
        gpus = view.count[idx].astype(np.float64)
        idle = gpus * (1.0 - used_after)
        fed = np.maximum(view.cpu[idx] - req.cpu_milli, 0) / self._m_cpu_per_gpu
        out: np.ndarray = np.maximum(idle - fed, 0.0) / np.maximum(gpus, 1.0)
        return out

    def _ids(self, names: list[str], wanted: tuple[str, ...]) -> np.ndarray:
        return np.array([i for i, nm in enumerate(names) if any(w in nm for w in wanted)], dtype=np.int32)

    def _resource(
        self,
        profile: Profile,
        req: PodRequest,
        rows: np.ndarray,
        f: np.ndarray,
        whole: np.ndarray,
        count: np.ndarray,
        used_after: np.ndarray,
        left_on_gpu: np.ndarray | None,
    ) -> np.ndarray:
        s = profile.strategy
        safe = np.maximum(count, 1.0)
        if profile.dynamic:  # RoundRobin / Random: neutral here, the per-request part is added by the caller
            return np.full(len(rows), 50.0)
        if s == "BestFit":
            if left_on_gpu is not None:
                return 100.0 * (1.0 - left_on_gpu / 1000.0)
            if req.mig:
                cols = [self.mig_names[p] for p, _ in req.mig if p in self.mig_names]
                want = sum(k for _, k in req.mig)
                spare = (self.mig_free[np.ix_(rows, np.array(cols))].sum(axis=1) - want) if cols else 0
                out: np.ndarray = 100.0 / (1.0 + np.maximum(spare, 0))
                return out
            out = 100.0 * (1.0 - np.maximum(whole - req.gpus, 0) / safe)
            return out
        if s in ("Spread", "LeastLoaded"):
            if s == "LeastLoaded":
                out = 100.0 * np.maximum(whole - (req.gpus if not req.shared else 0), 0) / safe
                return out
            return 100.0 * (1.0 - used_after)
        if s == "CostOptimized" and profile.prices:
            top = max(v for _, v in profile.prices) or 1.0
            price = np.array([self._price(profile, int(p)) for p in self.product_id[rows]], dtype=np.float64)
            return 100.0 * (1.0 - np.where(np.isnan(price), top, price) / top)
        if s == "Priority":
            out = np.clip(self.priority[rows], 0.0, 100.0)
            return out
        # BinPack; also the cached base of RoundRobin/Random and of CostOptimized without prices
        return 100.0 * used_after

    def _price(self, profile: Profile, product_id: int) -> float:
        if product_id < 0:
            return float("nan")
        name = self.product_names[product_id]
        for key, price in profile.prices:
            if key in name:
                return price
        return float("nan")


def dynamic_term(profile: Profile, names: Sequence[str], uid: str, tick: int) -> np.ndarray | None:
    """Per-request part of RoundRobin / Random (0..100), or None. Deterministic in (uid, tick, names)."""
    if profile.strategy == "Random":
        return np.array([zlib.crc32(f"{uid}/{nm}".encode()) % 101 for nm in names], dtype=np.float64)
    if profile.strategy == "RoundRobin":
        n = max(len(names), 1)
        return np.array([100.0 * ((i - tick) % n) / n for i in range(len(names))])[::-1].copy()
    return None


class ShapeCache:
    """Per-(request shape, profile) answers, valid while the row's version is unchanged. LRU-bounded."""

    def __init__(self, table: NodeTable, max_shapes: int = 512) -> None:
        self.table = table
        self.max_shapes = max_shapes
        self._entries: LRUCache[tuple[object, ...], list[np.ndarray]] = LRUCache(maxsize=max_shapes)

    def answer(
        self, rows: np.ndarray, req: PodRequest, profile: Profile
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = self.table
        key = (req.shape, profile)
        entry = self._entries.get(key)
        if entry is None or len(entry[0]) < t.cap:
            fresh: list[np.ndarray] = [
                np.full(t.cap, -1, np.int64),
                np.zeros(t.cap, np.int8),
                np.zeros(t.cap),
                np.zeros(t.cap, np.int8),
            ]
            if entry is not None:
                for new, old in zip(fresh, entry, strict=True):
                    new[: len(old)] = old
            entry = fresh
            self._entries[key] = entry
        ver, reason, score, best = entry
        stale = rows[ver[rows] != t.version[rows]]
        if len(stale):
            r, s, b = t.evaluate(stale, req, profile)
            reason[stale], score[stale], best[stale] = r, s, b
            ver[stale] = t.version[stale]
        return reason[rows], score[rows], best[rows]

    def clear(self) -> None:
        self._entries.clear()


def describe(code: int, table: NodeTable, row: int, req: PodRequest) -> str:
    """The sentence for a failed node (shown by kube-scheduler in the pod's FailedScheduling event)."""
    sentence = _describe(code, table, row, req)
    node = table.nodes[row] if 0 <= row < len(table.nodes) else None
    if node is not None and node.unhealthy and code in (WHOLE, SHARE, MIG, TOPOLOGY):
        sick = ", ".join(f"GPU {i} ({reason})" for i, reason in sorted(node.unhealthy.items()))
        sentence += f"; unhealthy, not used: {sick}"
    return sentence


def _describe(code: int, table: NodeTable, row: int, req: PodRequest) -> str:
    node = table.nodes[row] if 0 <= row < len(table.nodes) else None
    if node is not None:
        req = on_replicated(req, int(table.replicas[row]))
    free = table.gpu_free[row] if node is not None else None
    gpus = int(table.gpu_count[row]) if node is not None else 0
    if code == NO_GPU:
        return "kgwe: node has no NVIDIA GPUs"
    if node is None or free is None:
        return "kgwe: node rejected"
    if code == PRODUCT:
        product = node.product or node.model or "unknown"
        return f"kgwe: GPU product {product} is not one of {'|'.join(req.products)}"
    if code == FAMILY:
        return f"kgwe: GPU family {node.family or 'unknown'} is not one of {'|'.join(req.families)}"
    if code == MEMORY:
        have_gb, want_gb = node.gpu_memory_mib * 2**20 / 1e9, req.min_memory_mib * 2**20 / 1e9
        return f"kgwe: GPU memory {have_gb:.0f} GB is below the requested {want_gb:.0f} GB"
    if code == WHOLE:
        whole = int((free == 1000).sum())
        return f"kgwe: pod needs {req.gpus} whole GPUs, node has {whole} of {gpus} free"
    if code == SHARE:
        most = int(free[:gpus].max()) if gpus else 0
        return f"kgwe: pod needs {req.gpu_milli}/1000 of one GPU, the freest GPU has {most}/1000 left"
    if code == MIG:
        parts = []
        for prof, k in req.mig:
            col = table.mig_names.get(prof)
            have = int(table.mig_free[row, col]) if col is not None else 0
            if have < k:
                parts.append(f"{k}x {prof} (free {have})")
        return "kgwe: MIG instances not available: " + ", ".join(parts)
    if code == CPU:
        return f"kgwe: pod needs {req.cpu_milli}m CPU, node has {int(table.cpu_free[row])}m free"
    if code == RAM:
        return f"kgwe: pod needs {req.memory_mib} MiB memory, node has {int(table.mem_free[row])} MiB free"
    if code == TOPOLOGY:
        bw = f" with at least {req.min_bandwidth_gbps:g} GB/s" if req.min_bandwidth_gbps is not None else ""
        return f"kgwe: no set of {req.gpus} free GPUs{bw} (preference {req.preference})"
    if code == NO_TOPOLOGY:
        return "kgwe: node publishes no GPU topology (kgwe.nvidia.io/topology), bandwidth cannot be checked"
    return "kgwe: node rejected"
