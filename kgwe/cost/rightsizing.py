"""Rightsizing GPU pods from DCGM utilization (the VPA recommender's approach, adapted to GPUs).

- memory need = p95 of framebuffer used (DCGM_FI_DEV_FB_USED, MiB) × (1 + margin);
- compute need = p90 of engine activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE, summed over the pod's
  devices and scaled to whole-GPU equivalents) × (1 + margin); margin 15% as VPA's default;
- the recommendation is the smallest MIG profile of the pod's GPU model (kgwe.gpu.catalog) that
  covers both — "smallest" by the share of a GPU it blocks, max(compute, memory slices) — or, when
  one GPU is not enough or the model has no MIG, the smallest whole-GPU count that covers both;
- confidence grows with history like VPA's confidence interval: days / (days + 1) (12 h 0.33,
  24 h 0.5, 1 week 0.88); a recommendation below 0.5 (less than a day of data) is shown but marked
  low-confidence;
- a pod whose p95 compute is under 1% of a GPU is flagged idle (Kubecost's "GPU squatting").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from kgwe.cost.usage import MIG, SHARED, WHOLE
from kgwe.gpu.products import base_product

MARGIN = 0.15
MEMORY_PERCENTILE = 95
COMPUTE_PERCENTILE = 90
IDLE_COMPUTE = 0.01
LOW_CONFIDENCE = 0.5


@dataclass(frozen=True)
class Size:
    """A GPU allocation shape with its capacity in whole-GPU compute and MiB."""

    kind: str
    count: int
    mig_profile: str | None = None
    gpu_milli: int | None = None
    gpu_share: Fraction = Fraction(1)
    compute_gpus: float = 1.0
    memory_mib: float = 0.0

    @property
    def label(self) -> str:
        if self.kind == MIG:
            return f"{self.count}× MIG {self.mig_profile}"
        if self.kind == SHARED:
            return f"{self.count}× shared {self.gpu_milli}m"
        return f"{self.count}× GPU"


@dataclass(frozen=True)
class UtilizationSeries:
    namespace: str
    pod: str
    compute_gpus: Sequence[float]  # engine activity summed over devices: 1.0 = one GPU fully busy
    memory_mib: Sequence[float]
    history_seconds: float


@dataclass(frozen=True)
class Recommendation:
    namespace: str
    pod: str
    gpu_product: str
    current: Size
    recommended: Size
    p95_memory_mib: float
    p90_compute_gpus: float
    need_memory_mib: float
    need_compute_gpus: float
    confidence: float
    idle: bool
    samples: int

    @property
    def downsizable(self) -> bool:
        return self.recommended.gpu_share < self.current.gpu_share

    @property
    def undersized(self) -> bool:
        return self.recommended.gpu_share > self.current.gpu_share

    @property
    def low_confidence(self) -> bool:
        return self.confidence < LOW_CONFIDENCE


def _model(product: str):
    from kgwe.gpu import catalog

    return catalog.model_for_product(base_product(product))


def size_of(
    product: str, kind: str, count: int, mig_profile: str | None = None, gpu_milli: int | None = None
) -> Size:
    """Capacity of an allocation on a product (unknown products: 1 GPU = 1 compute, memory unknown)."""
    model = _model(product)
    gpu_memory = float(model.memory_mib) if model else 0.0
    if kind == MIG and model and mig_profile in model.profiles:
        prof = model.profiles[mig_profile]
        compute = Fraction(prof.compute_slices, model.compute_slots)
        share = max(compute, Fraction(prof.memory_slices, model.memory_slots))
        return Size(
            MIG,
            count,
            mig_profile,
            None,
            share * count,
            count * prof.compute_slices / model.compute_slots,
            float(count * prof.memory_mib),
        )
    if kind == SHARED:
        share = Fraction(gpu_milli or 0, 1000) * count
        return Size(SHARED, count, None, gpu_milli, share, float(share), float(share) * gpu_memory)
    return Size(WHOLE, count, None, None, Fraction(count), float(count), count * gpu_memory)


def confidence(history_seconds: float) -> float:
    days = max(history_seconds, 0.0) / 86400
    return days / (days + 1)


def _smallest_cover(product: str, need_compute: float, need_memory: float) -> Size:
    model = _model(product)
    if model is not None and model.mig_capable:
        fits = []
        for name, prof in model.profiles.items():
            if "+" in name:  # media-extension variants: same size, special purpose
                continue
            size = size_of(product, MIG, 1, name)
            if size.compute_gpus >= need_compute and size.memory_mib >= need_memory:
                fits.append((size.gpu_share, prof.compute_slices, prof.memory_mib, name, size))
        if fits:
            return min(fits)[-1]
    gpus = max(1, math.ceil(need_compute - 1e-9))
    if model is not None and model.memory_mib:
        gpus = max(gpus, math.ceil(need_memory / model.memory_mib - 1e-9))
    return size_of(product, WHOLE, gpus)


def recommend(
    series: UtilizationSeries,
    gpu_product: str,
    current: Size,
    *,
    margin: float = MARGIN,
) -> Recommendation | None:
    """None when there are no usable samples (never a guess)."""
    compute = np.asarray([c for c in series.compute_gpus if math.isfinite(c) and c >= 0], dtype=float)
    memory = np.asarray([m for m in series.memory_mib if math.isfinite(m) and m >= 0], dtype=float)
    if compute.size == 0 or memory.size == 0:
        return None
    p95_mem = float(np.percentile(memory, MEMORY_PERCENTILE))
    p90_compute = float(np.percentile(compute, COMPUTE_PERCENTILE))
    need_mem = p95_mem * (1 + margin)
    need_compute = p90_compute * (1 + margin)
    return Recommendation(
        namespace=series.namespace,
        pod=series.pod,
        gpu_product=gpu_product,
        current=current,
        recommended=_smallest_cover(gpu_product, need_compute, need_mem),
        p95_memory_mib=p95_mem,
        p90_compute_gpus=p90_compute,
        need_memory_mib=need_mem,
        need_compute_gpus=need_compute,
        confidence=confidence(series.history_seconds),
        idle=float(np.percentile(compute, 95)) < IDLE_COMPUTE,
        samples=int(min(compute.size, memory.size)),
    )


def undersized_samples(
    rec: Recommendation, compute_gpus: Sequence[float], memory_mib: Sequence[float]
) -> int:
    """Samples (memory and compute series counted separately) the recommended size would not cover."""
    size = rec.recommended
    bad = sum(1 for m in memory_mib if math.isfinite(m) and m > size.memory_mib)
    bad += sum(1 for c in compute_gpus if math.isfinite(c) and c > size.compute_gpus + 1e-9)
    return bad
