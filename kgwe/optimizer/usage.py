"""Decision 2: the GPU memory and compute a pod will really use, predicted from its first minutes and from
how similar pods went on, with a calibrated upper bound (docs/optimizer-usage.md, "Resources a workload will
really use").

Why a model at all: today's rule (kgwe.cost.rightsizing.recommend) sizes a pod on its own p95 memory and p90
compute plus 15%, which needs days of history. From the first hour alone it under-sizes most pods: a serving
pod watched from midnight has not met its daily peak, and GPU memory comes in spikes that an hour rarely
shows. What the first hour does tell is the pod's footprint (the model it loaded, its load level); the rest
comes from peers — pods of the same group that were watched longer:

- features of the first EARLY_SECONDS: peak memory (MiB) and p95 compute (whole-GPU equivalents);
- outcome of a peer: its peak memory and p95 compute over the rest of what was seen of it;
- peers: the pod's most specific group (`namespace/workload`, then `namespace`, then the whole cluster) with
  at least MIN_PEERS pods of history; within it the NEIGHBOURS whose first hour looked most alike (distance
  in log memory and in compute);
- bounds: split-conformal quantiles over those neighbours — memory as the pod's own early peak times the
  neighbours' ratio later/early peak, compute as the neighbours' later p95 — at LEVEL (P90) and the median.
  With exchangeable pods a bound at the ceil((n+1)·0.9)-th of n values holds for ≥ 90% of new pods;
  measured on held-out pods of the public genai trace it holds for 90-92% (bench/optimizer_usage.py).
- never below what the pod has already used (its observed peak memory and p95 compute).

Fallbacks, each with its reason and today's rule's numbers as the value: no sample times, too few usable
samples in the first minutes (telemetry gaps or values the GPU cannot hold), no group with enough peers.
A pod with a week of its own history is sized by today's rule: its own percentiles are then the better guide.
Pure: plain data in, plain data out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property

import numpy as np

from kgwe.cost.rightsizing import (
    COMPUTE_PERCENTILE,
    MARGIN,
    MEMORY_PERCENTILE,
    Recommendation,
    Size,
    UtilizationSeries,
    recommend,
    recommend_from_bounds,
)
from kgwe.gpu import catalog
from kgwe.gpu.products import base_product
from kgwe.optimizer.prediction import Prediction
from kgwe.vocab import GENERATED_NAME_ALPHABET

MODEL_NAME = "usage"
EARLY_SECONDS = 3600.0  # "the first minutes": what a pod shows in its first hour
MIN_EARLY_SAMPLES = 10  # fewer usable samples in the first hour: telemetry gaps, no prediction
MIN_LATER_SAMPLES = 30  # a peer needs this many samples after its first hour to count as history
NEIGHBOURS = 20  # the most alike peers a bound is taken over
MIN_PEERS = 19  # fewer peers in every group: no bound (a P90 needs ceil(0.9·(n+1)) <= n, and some slack)
LEVEL = 0.9  # the upper bound's level: advice covers the predicted P90 of the pod's later use
WEEK_SECONDS = 7 * 86400.0  # from a week of its own history on, a pod is sized by today's rule
HIGH_PERCENTILE = 95  # "high-percentile duty cycle": p95 of the compute series
MEMORY_SCALE = math.log(1.25)  # distance: a 25% difference in early peak memory ...
COMPUTE_SCALE = 0.10  # ... weighs as much as 0.1 GPU of early p95 compute
MIN_MEMORY_MIB = 256.0  # an early peak below this has loaded nothing yet: bound memory by peers' levels
CLUSTER = ""  # the group every peer is in
MAX_PEERS = 5_000  # a model keeps at most this many peers (the newest), so it stays small to store

MEMORY = "peak_memory_mib"
COMPUTE = "p95_compute_gpus"


@dataclass(frozen=True)
class Capacity:
    """What the devices a pod touches can hold: values above are absurd (a counter glitch), not use."""

    compute_gpus: float
    memory_mib: float  # 0: unknown (no memory ceiling is applied)


@dataclass(frozen=True)
class Use:
    """A stretch of a pod's use: peak memory (MiB), p95 compute (whole-GPU equivalents), samples seen."""

    memory_peak_mib: float
    compute_high_gpus: float
    samples: int


@dataclass(frozen=True)
class Peer:
    """A pod watched long enough to learn from: its groups, its first hour and what came after."""

    groups: tuple[str, ...]
    early: Use
    later: Use


@dataclass(frozen=True)
class Split:
    """A pod's series cut at EARLY_SECONDS after its first sample; `dropped` counts absurd values."""

    early: Use | None
    later: Use | None
    whole: Use | None
    dropped: int
    problem: str | None  # why no early Use (None: there is one)


def capacity_of(gpu_product: str, gpus: int) -> Capacity:
    """The physical devices behind an allocation of `gpus` GPUs (a MIG slice or a share: one GPU)."""
    model = catalog.model_for_product(base_product(gpu_product))
    count = max(1, gpus)
    return Capacity(float(count), float(model.memory_mib * count) if model else 0.0)


def _clean(
    times: Sequence[float], values: Sequence[float], ceiling: float
) -> tuple[np.ndarray, np.ndarray, int]:
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    if t.shape != v.shape:
        return np.zeros(0), np.zeros(0), len(values)
    ok = np.isfinite(t) & np.isfinite(v) & (v >= 0)
    if ceiling > 0:
        ok &= v <= ceiling * (1 + 1e-6)
    return t[ok], v[ok], int((~ok).sum())


def _use(compute: np.ndarray, memory: np.ndarray) -> Use | None:
    if compute.size == 0 or memory.size == 0:
        return None
    return Use(
        float(memory.max()),
        float(np.percentile(compute, HIGH_PERCENTILE)),
        int(min(compute.size, memory.size)),
    )


def split(series: UtilizationSeries, cap: Capacity, early_seconds: float = EARLY_SECONDS) -> Split:
    """The pod's first `early_seconds` and the rest, absurd values dropped (above the devices' memory or
    compute, negative, not finite)."""
    if not series.compute_times or not series.memory_times:
        return Split(None, None, None, 0, "its series carry no sample times")
    ct, cv, dc = _clean(series.compute_times, series.compute_gpus, cap.compute_gpus)
    mt, mv, dm = _clean(series.memory_times, series.memory_mib, cap.memory_mib)
    dropped = dc + dm
    if ct.size == 0 or mt.size == 0:
        return Split(None, None, None, dropped, f"no usable sample ({dropped} absurd value(s) dropped)")
    cut = min(float(ct.min()), float(mt.min())) + early_seconds
    early = _use(cv[ct <= cut], mv[mt <= cut])
    later_c, later_m = cv[ct > cut], mv[mt > cut]
    later = _use(later_c, later_m) if min(later_c.size, later_m.size) >= MIN_LATER_SAMPLES else None
    whole = _use(cv, mv)
    minutes = early_seconds / 60
    if early is None or early.samples < MIN_EARLY_SAMPLES:
        seen = early.samples if early else 0
        why = f"only {seen} usable sample(s) in its first {minutes:.0f} minutes (telemetry gaps"
        why += f", {dropped} absurd value(s) dropped)" if dropped else ")"
        return Split(None, later, whole, dropped, why)
    return Split(early, later, whole, dropped, None)


def peer_of(
    series: UtilizationSeries, groups: Sequence[str], cap: Capacity, early_seconds: float = EARLY_SECONDS
) -> Peer | None:
    """`series` as history to learn from, or None when it was not watched long enough after its first hour."""
    cut = split(series, cap, early_seconds)
    if cut.early is None or cut.later is None:
        return None
    return Peer(tuple(groups), cut.early, cut.later)


def group_keys(namespace: str, owner: str | None) -> tuple[str, ...]:
    """Most specific first: `namespace/owner` (the workload or the pods' common name), then `namespace`."""
    keys = [f"{namespace}/{owner}"] if owner else []
    return (*keys, namespace)


_SUFFIX = re.compile(f"^[{GENERATED_NAME_ALPHABET}]{{5}}$")
_TEMPLATE_HASH = re.compile(f"^[{GENERATED_NAME_ALPHABET}]{{6,10}}$")


def owner_name(pod: str) -> str:
    """The name a pod shares with its siblings: without the random suffix Kubernetes appends
    (generateName), a ReplicaSet's pod-template-hash before it, or a StatefulSet's ordinal."""
    parts = pod.split("-")
    if len(parts) > 1 and (_SUFFIX.match(parts[-1]) or parts[-1].isdigit()):
        parts.pop()
        if len(parts) > 1 and _TEMPLATE_HASH.match(parts[-1]) and any(c.isdigit() for c in parts[-1]):
            parts.pop()
    return "-".join(parts)


@dataclass(frozen=True)
class UsePrediction:
    """Both bounds of one pod, and which group they came from (empty when it fell back)."""

    memory: Prediction
    compute: Prediction
    group: str | None
    peers: int

    @property
    def from_model(self) -> bool:
        return self.memory.from_model and self.compute.from_model

    @property
    def why(self) -> str:
        return self.memory.why


def bounds_at(n: int, level: float) -> bool:
    """Whether n values can give a split-conformal bound at `level` (ceil((n+1)·level) <= n)."""
    return n >= 1 and math.ceil((n + 1) * level) <= n


def _conformal(values: Sequence[float], level: float) -> float:
    """The ceil((n+1)·level)-th smallest of n values: a split-conformal upper bound at `level`."""
    ordered = sorted(values)
    k = math.ceil((len(ordered) + 1) * level)
    return ordered[min(k, len(ordered)) - 1]


def _group_name(key: str) -> str:
    if key == CLUSTER:
        return "the cluster"
    return f"{'workload' if '/' in key else 'namespace'} {key}"


@dataclass(frozen=True)
class UsageModel:
    """Peers to learn from and how to bound; `predict` never raises on odd input, it falls back."""

    peers: tuple[Peer, ...]
    level: float = LEVEL
    neighbours: int = NEIGHBOURS
    min_peers: int = MIN_PEERS
    early_seconds: float = EARLY_SECONDS  # the window the peers' `early` was measured over

    def __post_init__(self) -> None:
        if not 0.5 <= self.level < 1:
            raise ValueError(f"usage model: level must be within [0.5, 1), got {self.level!r}")
        if not (math.isfinite(self.early_seconds) and self.early_seconds > 0):
            raise ValueError(f"usage model: early_seconds must be positive, got {self.early_seconds!r}")
        for what, n in (("neighbours", self.neighbours), ("min_peers", self.min_peers)):
            if not bounds_at(n, self.level):
                raise ValueError(f"usage model: {n} {what} cannot bound at level {self.level}")

    @cached_property
    def _index(self) -> dict[str, np.ndarray]:
        """Group key -> the positions of its peers (CLUSTER: all), so a prediction reads only its group."""
        members: dict[str, list[int]] = {CLUSTER: list(range(len(self.peers)))}
        for i, p in enumerate(self.peers):
            for g in dict.fromkeys(p.groups):
                members.setdefault(g, []).append(i)
        return {k: np.asarray(v, dtype=int) for k, v in members.items()}

    @cached_property
    def _early(self) -> tuple[np.ndarray, np.ndarray]:
        """Each peer's log early peak memory and early p95 compute: the distance's coordinates."""
        memory = np.log(np.maximum([p.early.memory_peak_mib for p in self.peers], 1.0))
        return memory, np.asarray([p.early.compute_high_gpus for p in self.peers], dtype=float)

    @cached_property
    def _position(self) -> dict[int, int]:
        return {id(p): i for i, p in enumerate(self.peers)}

    def _group(self, groups: Sequence[str], exclude: Peer | None) -> tuple[str, np.ndarray] | None:
        own = self._position.get(id(exclude), -1) if exclude is not None else -1
        for key in (*groups, CLUSTER):
            members = self._index.get(key, np.zeros(0, dtype=int))
            members = members[members != own]
            if len(members) >= self.min_peers:
                return key, members
        return None

    def _nearest(self, early: Use, members: np.ndarray) -> list[Peer]:
        """The `neighbours` members whose first hour was closest to `early` (ties: the older peer first)."""
        log_memory, compute = self._early
        distance = np.abs(log_memory[members] - math.log(max(early.memory_peak_mib, 1.0))) / MEMORY_SCALE
        distance += np.abs(compute[members] - early.compute_high_gpus) / COMPUTE_SCALE
        order = np.lexsort((members, distance))[: self.neighbours]
        return [self.peers[int(i)] for i in members[order]]

    def predict(
        self,
        groups: Sequence[str],
        early: Use,
        fallback: tuple[float, float],
        exclude: Peer | None = None,
    ) -> UsePrediction:
        """Bounds of a pod's later peak memory and p95 compute from its first hour (`early`).
        `fallback` is today's rule's (compute, memory) need: the value a fallback prediction carries;
        `exclude` the pod's own record when it is also a peer (it must not predict itself)."""
        found = self._group(groups, exclude)
        if found is None:
            return fallback_prediction(
                f"only {len(self.peers)} pod(s) with history, fewer than {self.min_peers} in any group of "
                "this pod: today's p95/p90 rule",
                fallback,
            )
        key, members = found
        near = self._nearest(early, members)
        n = len(near)
        if early.memory_peak_mib >= MIN_MEMORY_MIB:
            ratios = [
                p.later.memory_peak_mib / p.early.memory_peak_mib
                for p in near
                if p.early.memory_peak_mib >= MIN_MEMORY_MIB
            ]
            mem_q = {
                q: early.memory_peak_mib * _conformal(ratios, q) if ratios else math.nan
                for q in (0.5, self.level)
            }
        else:
            mem_q = {q: _conformal([p.later.memory_peak_mib for p in near], q) for q in (0.5, self.level)}
        comp_q = {q: _conformal([p.later.compute_high_gpus for p in near], q) for q in (0.5, self.level)}
        if not all(math.isfinite(v) for v in (*mem_q.values(), *comp_q.values())):
            return fallback_prediction("its peers' history is unusable: today's p95/p90 rule", fallback)
        reason = (
            f"P{round(self.level * 100)} from the {n} pods of {_group_name(key)} (of {len(members)} with "
            f"history) whose first hour looked most like this one's"
        )
        memory, compute = (
            Prediction.make(quantity, q[0.5], q, reason=reason, samples=n, model=MODEL_NAME, floor=floor)
            for quantity, q, floor in (
                (MEMORY, mem_q, early.memory_peak_mib),
                (COMPUTE, comp_q, early.compute_high_gpus),
            )
        )
        return UsePrediction(memory, compute, key, n)


def fallback_prediction(why: str, rule: tuple[float, float]) -> UsePrediction:
    """Today's rule's needs as the value, with `why` the model did not answer."""
    compute, memory = (v if math.isfinite(v) else 0.0 for v in rule)
    return UsePrediction(
        Prediction.make(MEMORY, memory, fallback=why, model=MODEL_NAME),
        Prediction.make(COMPUTE, compute, fallback=why, model=MODEL_NAME),
        None,
        0,
    )


def rule_needs(series: UtilizationSeries, margin: float = MARGIN) -> tuple[float, float]:
    """Today's rule's (compute, memory) need on every usable sample; (nan, nan) without any."""
    c = [v for v in series.compute_gpus if math.isfinite(v) and v >= 0]
    m = [v for v in series.memory_mib if math.isfinite(v) and v >= 0]
    if not c or not m:
        return math.nan, math.nan
    return (
        float(np.percentile(c, COMPUTE_PERCENTILE)) * (1 + margin),
        float(np.percentile(m, MEMORY_PERCENTILE)) * (1 + margin),
    )


def predict_use(
    model: UsageModel | None,
    series: UtilizationSeries,
    groups: Sequence[str],
    cap: Capacity,
    exclude: Peer | None = None,
) -> UsePrediction:
    """The pod's bounds, or a fallback that says why not (never raises on odd series)."""
    rule = rule_needs(series)
    if model is None:
        return fallback_prediction("no usage model fitted yet: today's p95/p90 rule", rule)
    cut = split(series, cap, model.early_seconds)
    if cut.early is None:
        return fallback_prediction(f"{cut.problem}: today's p95/p90 rule", rule)
    prediction = model.predict(groups, cut.early, rule, exclude)
    if not prediction.from_model or cut.whole is None:
        return prediction
    # never below what the pod has already used
    return UsePrediction(
        _raised(prediction.memory, cut.whole.memory_peak_mib),
        _raised(prediction.compute, cut.whole.compute_high_gpus),
        prediction.group,
        prediction.peers,
    )


def _raised(p: Prediction, floor: float) -> Prediction:
    return Prediction.make(
        p.quantity, p.value, p.quantiles, reason=p.reason, samples=p.samples, model=p.model, floor=floor
    )


def advise(
    series: UtilizationSeries,
    groups: Sequence[str],
    gpu_product: str,
    current: Size,
    model: UsageModel | None,
    *,
    gpus: int = 1,
    price_per_hour: Decimal | None = None,
    currency: str = "",
    exclude: Peer | None = None,
) -> tuple[Recommendation | None, UsePrediction]:
    """A rightsizing recommendation for one pod and the prediction behind it. A pod with a week of its own
    history, or whose prediction fell back, is sized by today's rule (and says why); otherwise on the
    model's P90 bounds. None (with the prediction's reason) when the pod has no usable sample at all."""
    cap = capacity_of(gpu_product, gpus)
    prediction = predict_use(model, series, groups, cap, exclude)
    if series.history_seconds >= WEEK_SECONDS or not prediction.from_model:
        why = (
            "a week of its own history: today's p95/p90 rule"
            if series.history_seconds >= WEEK_SECONDS
            else prediction.why
        )
        rec = recommend(
            series, gpu_product, current, price_per_hour=price_per_hour, currency=currency, reason=why
        )
        return rec, prediction
    level = max(prediction.memory.quantiles)
    rec = recommend_from_bounds(
        series,
        gpu_product,
        current,
        prediction.compute.at(level),
        prediction.memory.at(level),
        prediction.memory.reason,
        price_per_hour=price_per_hour,
        currency=currency,
    )
    return rec, prediction


def fit(
    series: Iterable[tuple[UtilizationSeries, Sequence[str], Capacity]],
    *,
    level: float = LEVEL,
    early_seconds: float = EARLY_SECONDS,
) -> UsageModel:
    """A model from every pod watched long enough (the newest MAX_PEERS when there are more)."""
    peers = [p for s, groups, cap in series if (p := peer_of(s, groups, cap, early_seconds)) is not None]
    return UsageModel(tuple(peers[-MAX_PEERS:]), level=level, early_seconds=early_seconds)


HOLDOUT_LIMIT = 200  # peers held out to score a fitted model (the newest): a bound on the scoring's cost


def holdout_coverage(model: UsageModel, limit: int = HOLDOUT_LIMIT) -> tuple[float, float, int]:
    """Each of the newest `limit` peers held out in turn and predicted from the others: the share whose later
    peak memory, and p95 compute, stayed within the P90 bounds; and how many were scored (answered)."""
    mem = comp = n = 0
    for peer in model.peers[-limit:]:
        pred = model.predict(peer.groups, peer.early, (0.0, 0.0), exclude=peer)
        if not pred.from_model:
            continue
        n += 1
        mem += peer.later.memory_peak_mib <= pred.memory.at(model.level)
        comp += peer.later.compute_high_gpus <= pred.compute.at(model.level)
    return (mem / n if n else math.nan), (comp / n if n else math.nan), n


def to_params(model: UsageModel) -> dict[str, object]:
    """The model as plain JSON data for its ModelRecord (about 60 bytes a peer)."""
    return {
        "level": model.level,
        "neighbours": model.neighbours,
        "minPeers": model.min_peers,
        "earlySeconds": model.early_seconds,
        "peers": [
            [
                list(p.groups),
                round(p.early.memory_peak_mib, 1),
                round(p.early.compute_high_gpus, 4),
                round(p.later.memory_peak_mib, 1),
                round(p.later.compute_high_gpus, 4),
            ]
            for p in model.peers
        ],
    }


def from_params(params: Mapping[str, object]) -> UsageModel | None:
    """The model `to_params` wrote; None when the params are not that (a record of another shape)."""
    raw, level = params.get("peers"), params.get("level", LEVEL)
    neighbours, min_peers = params.get("neighbours", NEIGHBOURS), params.get("minPeers", MIN_PEERS)
    early_seconds = params.get("earlySeconds", EARLY_SECONDS)
    if not isinstance(raw, list) or len(raw) > MAX_PEERS or not isinstance(level, float):
        return None
    if not isinstance(early_seconds, int | float) or isinstance(early_seconds, bool):
        return None
    if not isinstance(neighbours, int) or not isinstance(min_peers, int):
        return None
    peers = []
    for row in raw:
        if not isinstance(row, list) or len(row) != 5 or not isinstance(row[0], list):
            return None
        values = row[1:]
        if not all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in values):
            return None
        em, ec, lm, lc = (float(v) for v in values)
        groups = tuple(str(g) for g in row[0])
        peers.append(Peer(groups, Use(em, ec, MIN_EARLY_SAMPLES), Use(lm, lc, MIN_LATER_SAMPLES)))
    try:
        return UsageModel(
            tuple(peers),
            level=level,
            neighbours=neighbours,
            min_peers=min_peers,
            early_seconds=float(early_seconds),
        )
    except ValueError:
        return None
