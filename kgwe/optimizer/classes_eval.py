"""How the workload classes were checked, on data without labels (decision 4).

The public genai trace holds Stable Diffusion serving pods only (its publication says so), so:
1. every pod it classes should be inference or an idle holder — the share that is, is `consistent`;
2. an idle holder should still hold GPU memory (a model loaded and never served) — `idle_holding_memory`;
3. a pod's class should be the same on both halves of its series — `halves_agree` (the trace's second half
   is the night: serving pods then see little traffic, which is what lowers this figure).
Pure: the series in, counts out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kgwe.cost.rightsizing import UtilizationSeries
from kgwe.optimizer.classes import MODEL_NAME, classify
from kgwe.optimizer.registry import Evaluation
from kgwe.vocab import WORKLOAD_CLASS_IDLE, WORKLOAD_CLASS_INFERENCE, WORKLOAD_CLASS_UNKNOWN

PodSeries = tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]]  # ct, cv, mt, mv
HOLDING_MIB = 1024.0  # an idle holder with at least this much GPU memory in use holds something


@dataclass(frozen=True)
class ClassCheck:
    counts: dict[str, int]
    classified: int
    consistent: int
    idle: int
    idle_holding_memory: int
    halves_compared: int
    halves_agree: int

    def figures(self) -> dict[str, float | int]:
        return {
            "classes_pods_classified": self.classified,
            "classes_consistent_with_serving_fraction": round(self.consistent / self.classified, 4)
            if self.classified
            else 0.0,
            "classes_idle_holders": self.idle,
            "classes_idle_holding_memory": self.idle_holding_memory,
            "classes_halves_agree_fraction": round(self.halves_agree / self.halves_compared, 4)
            if self.halves_compared
            else 0.0,
        }


def _series(name: str, ct: Sequence[float], cv: Sequence[float], mv: Sequence[float]) -> UtilizationSeries:
    span = (ct[-1] - ct[0]) if ct else 0.0
    return UtilizationSeries("trace", name, list(cv), list(mv), span, compute_times=list(ct))


def check_serving_trace(pods: Mapping[str, PodSeries]) -> ClassCheck:
    counts: Counter[str] = Counter()
    consistent = idle = holding = compared = agree = 0
    for name, (ct, cv, _mt, mv) in sorted(pods.items()):
        cls = classify(_series(name, ct, cv, mv))
        counts[cls.name] += 1
        if cls.name == WORKLOAD_CLASS_UNKNOWN:
            continue
        consistent += cls.name in (WORKLOAD_CLASS_INFERENCE, WORKLOAD_CLASS_IDLE)
        if cls.name == WORKLOAD_CLASS_IDLE:
            idle += 1
            holding += bool(cls.evidence and cls.evidence.memory_mib >= HOLDING_MIB)
        half, mhalf = len(cv) // 2, len(mv) // 2
        first = classify(_series(name, ct[:half], cv[:half], mv[:mhalf])).name
        second = classify(_series(name, ct[half:], cv[half:], mv[mhalf:])).name
        if WORKLOAD_CLASS_UNKNOWN not in (first, second):
            compared += 1
            agree += first == second
    classified = sum(n for k, n in counts.items() if k != WORKLOAD_CLASS_UNKNOWN)
    return ClassCheck(dict(sorted(counts.items())), classified, consistent, idle, holding, compared, agree)


def evaluate(data_dir: Path, quick: bool) -> Evaluation:
    """The registry's evaluator: the checks above on alibaba-genai-v2026 (`quick`: the first 60 pods)."""
    from kgwe.cost.datasets import genai_pod_series

    pods = genai_pod_series(data_dir)
    if quick:
        pods = dict(sorted(pods.items())[:60])
    check = check_serving_trace(pods)
    counts = ", ".join(f"{k} {n}" for k, n in check.counts.items())
    return Evaluation(
        MODEL_NAME,
        check.figures(),
        (
            f"genai-v2026 (Stable Diffusion serving pods, no labels): {counts}",
            f"inference or idle, as a serving trace should be: {check.consistent} of {check.classified}; "
            f"idle holders still holding GPU memory: {check.idle_holding_memory} of {check.idle}; "
            f"same class on both halves of the series: {check.halves_agree} of {check.halves_compared}",
        ),
    )
