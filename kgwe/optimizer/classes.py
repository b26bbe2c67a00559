"""Decision 4: what a running pod is doing with its GPUs — training, inference, interactive or holding them
idle — read from its DCGM telemetry alone (docs/optimizer-usage.md, "Workload classes").

The signatures, per GPU held (engine activity divided by the GPUs the pod holds, 0..1; a sample is "busy"
above BUSY_UTILIZATION):
- idle holder: p95 utilization below IDLE_COMPUTE (the rightsizing's idle line) — it holds GPUs and memory
  and does nothing with them;
- training: busy nearly all the time at a high level (busy ≥ TRAINING_BUSY of samples, median ≥
  TRAINING_MEDIAN): an optimizer loop does not pause;
- interactive: rare bursts between long pauses (busy ≤ INTERACTIVE_BUSY of samples and the median pause
  ≥ INTERACTIVE_PAUSE_SECONDS): a person running cells;
- inference: the rest — busy in short bursts as requests come, pauses of a minute or two.
Too little telemetry (under MIN_SECONDS or MIN_SAMPLES) is UNKNOWN, never a guess.

The data has no labels, so these rules were checked against what is known about it (kgwe.optimizer.
classes_eval): the public genai trace holds Stable Diffusion serving pods only, so every pod of it should be
inference or idle; the idle ones should still hold a model in memory; and a pod's class should not change
between the halves of its series. Training and notebook signatures could not be checked on public per-pod
telemetry (none is in the data); in a cluster, the report sets each class beside the GPUWorkload's declared
workloadType. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kgwe.cost.rightsizing import IDLE_COMPUTE, UtilizationSeries
from kgwe.vocab import (
    WORKLOAD_CLASS_IDLE,
    WORKLOAD_CLASS_INFERENCE,
    WORKLOAD_CLASS_INTERACTIVE,
    WORKLOAD_CLASS_TRAINING,
    WORKLOAD_CLASS_UNKNOWN,
    WORKLOAD_TYPE_CLASSES,
)

MODEL_NAME = "classes"
BUSY_UTILIZATION = 0.05  # a sample above 5% of the GPUs held is busy
TRAINING_BUSY = 0.8
TRAINING_MEDIAN = 0.3
INTERACTIVE_BUSY = 0.2
INTERACTIVE_PAUSE_SECONDS = 600.0
MIN_SECONDS = 1800.0  # half an hour of telemetry before a pod is classed
MIN_SAMPLES = 20


@dataclass(frozen=True)
class Evidence:
    """What the class was read from (per GPU held)."""

    samples: int
    seconds: float
    p95_utilization: float
    median_utilization: float
    busy_fraction: float
    median_pause_seconds: float
    memory_mib: float  # median memory held


@dataclass(frozen=True)
class PodClass:
    name: str  # a WORKLOAD_CLASS_* word
    reason: str
    evidence: Evidence | None = None


def _pauses(busy: np.ndarray, step_seconds: float) -> list[float]:
    """Lengths (seconds) of the runs of idle samples between busy ones (not the leading or trailing run:
    those are before the pod's first or after its last burst, not a pause)."""
    out, run, seen_busy = [], 0, False
    for b in busy:
        if b:
            if seen_busy and run:
                out.append(run * step_seconds)
            run, seen_busy = 0, True
        else:
            run += 1
    return out


def evidence(series: UtilizationSeries, gpus: float = 1.0) -> Evidence | None:
    """The signature of `series`, or None without any usable compute sample."""
    util = np.asarray([v for v in series.compute_gpus if math.isfinite(v) and v >= 0], dtype=float)
    if util.size == 0:
        return None
    util = np.minimum(util / max(gpus, 1e-9), 1.0)
    times = np.asarray(series.compute_times, dtype=float) if series.compute_times else np.zeros(0)
    times = times[np.isfinite(times)]
    if times.size >= 2:
        span = float(times.max() - times.min())
        step = float(np.median(np.diff(np.sort(times)))) or span / max(times.size - 1, 1)
    else:
        span = max(series.history_seconds, 0.0)
        step = span / max(util.size - 1, 1)
    busy = util > BUSY_UTILIZATION
    pauses = _pauses(busy, step)
    memory = [v for v in series.memory_mib if math.isfinite(v) and v >= 0]
    return Evidence(
        samples=int(util.size),
        seconds=span,
        p95_utilization=float(np.percentile(util, 95)),
        median_utilization=float(np.median(util)),
        busy_fraction=float(busy.mean()),
        median_pause_seconds=float(np.median(pauses)) if pauses else (span if not busy.any() else 0.0),
        memory_mib=float(np.median(memory)) if memory else 0.0,
    )


def classify(series: UtilizationSeries, gpus: float = 1.0) -> PodClass:
    """The class of a pod from its telemetry, with the reason in one sentence."""
    ev = evidence(series, gpus)
    if ev is None or ev.samples < MIN_SAMPLES or ev.seconds < MIN_SECONDS:
        seen = f"{ev.samples} sample(s) over {ev.seconds / 60:.0f} min" if ev else "no usable sample"
        return PodClass(WORKLOAD_CLASS_UNKNOWN, f"too little telemetry to class ({seen})", ev)
    hours = f"{ev.seconds / 3600:.1f} h"
    if ev.p95_utilization < IDLE_COMPUTE:
        held = f", holding {ev.memory_mib / 1024:.1f} GiB of GPU memory" if ev.memory_mib else ""
        return PodClass(
            WORKLOAD_CLASS_IDLE,
            f"idle holder: p95 utilization {ev.p95_utilization:.1%} over {hours}{held}",
            ev,
        )
    if ev.busy_fraction >= TRAINING_BUSY and ev.median_utilization >= TRAINING_MEDIAN:
        return PodClass(
            WORKLOAD_CLASS_TRAINING,
            f"training: busy {ev.busy_fraction:.0%} of the time, median utilization "
            f"{ev.median_utilization:.0%} over {hours}",
            ev,
        )
    if ev.busy_fraction <= INTERACTIVE_BUSY and ev.median_pause_seconds >= INTERACTIVE_PAUSE_SECONDS:
        return PodClass(
            WORKLOAD_CLASS_INTERACTIVE,
            f"interactive: bursts between long pauses (median pause {ev.median_pause_seconds / 60:.0f} "
            f"min, busy {ev.busy_fraction:.0%} of the time) over {hours}",
            ev,
        )
    return PodClass(
        WORKLOAD_CLASS_INFERENCE,
        f"inference: busy in short bursts (median pause {ev.median_pause_seconds / 60:.0f} min, busy "
        f"{ev.busy_fraction:.0%} of the time, p95 {ev.p95_utilization:.0%}) over {hours}",
        ev,
    )


def declared_class(workload_type: str | None) -> str | None:
    """The class a GPUWorkload's declared workloadType stands for (None: not declared or not mapped)."""
    return WORKLOAD_TYPE_CLASSES.get(workload_type or "")


def agreement(pairs: Sequence[tuple[str, str | None]]) -> tuple[int, int]:
    """(agreeing, compared) over (observed class, declared class) pairs; an idle holder agrees with no
    declaration (a notebook or a server can both sit idle) and is not compared, nor is UNKNOWN."""
    compared = [
        (seen, said)
        for seen, said in pairs
        if said is not None and seen not in (WORKLOAD_CLASS_IDLE, WORKLOAD_CLASS_UNKNOWN)
    ]
    return sum(1 for seen, said in compared if seen == said), len(compared)
