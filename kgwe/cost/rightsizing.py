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
- a pod whose p95 compute is under 1% of a GPU is flagged idle (Kubecost's "GPU squatting");
- on a GPU without MIG, a pod that needs at most 1/R of one GPU's compute and memory is recommended a
  time-sliced replica (a GPUSharingStrategy with `replicas: R`; R from SHARING_REPLICAS, most saving
  first), priced as its share like the chargeback prices replicas; with the GPU's price, the
  recommendation says what it saves per month.

Before a week of history the pod's own percentiles say little about the rest of its life (a serving pod
watched from midnight has not met its daily peak). A model of how similar pods went on to use their GPUs
(kgwe.optimizer.usage) can then give upper bounds instead: `recommend_from_bounds` sizes a pod on them,
and the recommendation says which basis it stands on (`RULE` or `MODEL`) and why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import numpy as np

from kgwe.cost.usage import MIG, SHARED, WHOLE
from kgwe.gpu.catalog import GPUModel
from kgwe.gpu.products import base_product
from kgwe.gpu.sharing import replica_milli

MARGIN = 0.15
MEMORY_PERCENTILE = 95
COMPUTE_PERCENTILE = 90
IDLE_COMPUTE = 0.01
LOW_CONFIDENCE = 0.5
SHARING_REPLICAS = (8, 4, 2)  # time-slicing candidates, most saving first
HOURS_PER_MONTH = Decimal(730)  # 365 × 24 / 12, as cloud price sheets count a month
RULE = "rule"  # sized on the pod's own percentiles plus MARGIN (the VPA recommender's way)
MODEL = "model"  # sized on a model's upper bounds of the pod's later use (kgwe.optimizer.usage)


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
    replicas: int | None = None  # a time-sliced replica of a GPU shared `replicas` ways

    @property
    def label(self) -> str:
        if self.replicas:
            return f"{self.count}× time-sliced replica (×{self.replicas})"
        if self.kind == MIG:
            return f"{self.count}× MIG {self.mig_profile}"
        if self.kind == SHARED:
            return f"{self.count}× shared {self.gpu_milli}m"
        return f"{self.count}× GPU"


@dataclass(frozen=True)
class UtilizationSeries:
    """A pod's DCGM series. The times (epoch seconds, one per value) are optional: the rule needs only the
    values, a model of the pod's first minutes needs to know which values came first."""

    namespace: str
    pod: str
    compute_gpus: Sequence[float]  # engine activity summed over devices: 1.0 = one GPU fully busy
    memory_mib: Sequence[float]
    history_seconds: float
    compute_times: Sequence[float] = ()
    memory_times: Sequence[float] = ()


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
    monthly_saving: Decimal | None = None  # (current - recommended share) × price × 730 h, when priced
    currency: str = ""
    basis: str = RULE  # RULE or MODEL: what the size stands on
    reason: str = ""  # why that basis, in a sentence ("from 37 pods of ml-research ...")
    workload_class: str = ""  # what the pod's telemetry looks like (kgwe.optimizer.classes), "" unknown

    @property
    def sharing_advice(self) -> str | None:
        """E.g. "uses 9% of a GPU at p90: time-slice ×4 saves $1,234.00/month" for a time-slice advice."""
        if not self.recommended.replicas or not self.downsizable:
            return None
        saving = ""
        if self.monthly_saving is not None:
            saving = f" saves {self.monthly_saving:,.2f} {self.currency}/month".replace(" /", "/")
        share = f"{self.p90_compute_gpus:.0%}"
        return f"uses {share} of a GPU at p90: time-slice ×{self.recommended.replicas}{saving}"

    @property
    def downsizable(self) -> bool:
        return self.recommended.gpu_share < self.current.gpu_share

    @property
    def undersized(self) -> bool:
        return self.recommended.gpu_share > self.current.gpu_share

    @property
    def low_confidence(self) -> bool:
        """Less than a day of the pod's own history behind a RULE size (a MODEL size rests on its peers)."""
        return self.basis == RULE and self.confidence < LOW_CONFIDENCE


def _model(product: str) -> GPUModel | None:
    from kgwe.gpu import catalog

    return catalog.model_for_product(base_product(product))


def size_of(
    product: str, kind: str, count: int, mig_profile: str | None = None, gpu_milli: int | None = None
) -> Size:
    """Capacity of an allocation on a product (unknown products: 1 GPU = 1 compute, memory unknown)."""
    model = _model(product)
    gpu_memory = float(model.memory_mib) if model else 0.0
    if kind == MIG and model and mig_profile is not None and mig_profile in model.profiles:
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


def smallest_cover(product: str, need_compute: float, need_memory: float) -> Size:
    """The smallest allocation of `product` with at least `need_compute` whole-GPU compute and
    `need_memory` MiB: a MIG profile, else a time-sliced replica, else whole GPUs."""
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
    if model is not None and model.memory_mib and need_compute <= 1:
        for replicas in SHARING_REPLICAS:
            if need_compute <= 1 / replicas and need_memory <= model.memory_mib / replicas:
                size = size_of(product, SHARED, 1, gpu_milli=replica_milli(replicas))
                return Size(**{**size.__dict__, "replicas": replicas})
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
    price_per_hour: Decimal | None = None,
    currency: str = "",
    reason: str = "",
) -> Recommendation | None:
    """None when there are no usable samples (never a guess). With the GPU's price per hour, the
    recommendation carries its monthly saving."""
    usable = _usable(series)
    if usable is None:
        return None
    compute, memory = usable
    p95_mem = float(np.percentile(memory, MEMORY_PERCENTILE))
    p90_compute = float(np.percentile(compute, COMPUTE_PERCENTILE))
    return _recommendation(
        series,
        usable,
        gpu_product,
        current,
        (p90_compute * (1 + margin), p95_mem * (1 + margin)),
        price_per_hour,
        currency,
        RULE,
        reason,
    )


def recommend_from_bounds(
    series: UtilizationSeries,
    gpu_product: str,
    current: Size,
    need_compute_gpus: float,
    need_memory_mib: float,
    reason: str,
    *,
    price_per_hour: Decimal | None = None,
    currency: str = "",
) -> Recommendation | None:
    """Sized on a model's upper bounds of the pod's later compute and memory (no margin on top: the bound
    is the margin); the pod's own percentiles are still shown beside it. None without usable samples."""
    usable = _usable(series)
    if usable is None or not (math.isfinite(need_compute_gpus) and math.isfinite(need_memory_mib)):
        return None
    bounds = (max(0.0, need_compute_gpus), max(0.0, need_memory_mib))
    return _recommendation(
        series, usable, gpu_product, current, bounds, price_per_hour, currency, MODEL, reason
    )


def _usable(series: UtilizationSeries) -> tuple[np.ndarray, np.ndarray] | None:
    compute = np.asarray([c for c in series.compute_gpus if math.isfinite(c) and c >= 0], dtype=float)
    memory = np.asarray([m for m in series.memory_mib if math.isfinite(m) and m >= 0], dtype=float)
    if compute.size == 0 or memory.size == 0:
        return None
    return compute, memory


def _recommendation(
    series: UtilizationSeries,
    usable: tuple[np.ndarray, np.ndarray],
    gpu_product: str,
    current: Size,
    need: tuple[float, float],
    price_per_hour: Decimal | None,
    currency: str,
    basis: str,
    reason: str,
) -> Recommendation:
    compute, memory = usable
    need_compute, need_mem = need
    recommended = smallest_cover(gpu_product, need_compute, need_mem)
    saving = None
    if price_per_hour is not None:
        share = current.gpu_share - recommended.gpu_share
        saving = (
            Decimal(share.numerator) / Decimal(share.denominator) * price_per_hour * HOURS_PER_MONTH
        ).quantize(Decimal("0.01"))
    return Recommendation(
        namespace=series.namespace,
        pod=series.pod,
        gpu_product=gpu_product,
        current=current,
        recommended=recommended,
        p95_memory_mib=float(np.percentile(memory, MEMORY_PERCENTILE)),
        p90_compute_gpus=float(np.percentile(compute, COMPUTE_PERCENTILE)),
        need_memory_mib=need_mem,
        need_compute_gpus=need_compute,
        confidence=confidence(series.history_seconds),
        idle=float(np.percentile(compute, 95)) < IDLE_COMPUTE,
        samples=int(min(compute.size, memory.size)),
        monthly_saving=saving,
        currency=currency,
        basis=basis,
        reason=reason,
    )


def undersized_samples(
    rec: Recommendation, compute_gpus: Sequence[float], memory_mib: Sequence[float]
) -> int:
    """Samples (memory and compute series counted separately) the recommended size would not cover."""
    size = rec.recommended
    bad = sum(1 for m in memory_mib if math.isfinite(m) and m > size.memory_mib)
    bad += sum(1 for c in compute_gpus if math.isfinite(c) and c > size.compute_gpus + 1e-9)
    return bad
