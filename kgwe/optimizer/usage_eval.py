"""Decision 2 measured on held-out pods: the usage model's advice against today's rule and the request.

Each pod of the trace is held out in turn (leave-one-out): the model learns from every other pod, sees the
held-out pod's first hour only, and its advice is checked against what that pod used afterwards. Today's
rule sizes the same pod from the same first hour (p95 memory and p90 compute plus its margin). Every pod is
taken to hold one whole GPU of `gpu_product` (the request); advice never goes above the request here, so
"savings" are what downsizing would free:

- savings fraction: Σ (request share − advised share) × hours after the first hour / Σ request × hours;
- exceed fraction: the share of pods whose later peak memory or later p95 compute is above the advice
  (a MIG slice's memory is a hard limit: above it the pod fails);
- coverage: the share of pods whose later peak memory (p95 compute) is at or below the P90 bound.

"For the same savings": a rule with a larger margin saves less and exceeds less; applying a rule to some pods
and keeping the others at their request mixes two points of its curve. The baseline at the model's savings is
the best the rule reaches that way (the lower convex hull of its curve over margins 0..300%, with the request
at (0, 0)) — the most favourable reading of the rule. Pure: the series in, figures out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kgwe.cost.rightsizing import (
    MARGIN,
    Recommendation,
    Size,
    UtilizationSeries,
    recommend,
    size_of,
    smallest_cover,
)
from kgwe.cost.usage import WHOLE
from kgwe.optimizer.registry import Evaluation
from kgwe.optimizer.usage import (
    EARLY_SECONDS,
    LEVEL,
    MODEL_NAME,
    Peer,
    UsageModel,
    Use,
    advise,
    bounds_at,
    capacity_of,
    split,
)

PodSeries = tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]]  # ct, cv, mt, mv
DEFAULT_PRODUCT = "NVIDIA-A100-SXM4-80GB"  # the GPU each trace pod is taken to hold (80 GB: its peaks fit)
RULE_MARGINS = tuple(m / 20 for m in range(61))  # 0%, 5%, ... 300%
MODEL_LEVELS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


@dataclass(frozen=True)
class HeldOut:
    """One pod of the evaluation: what it showed first, what it used later, for how long."""

    name: str
    early_series: UtilizationSeries
    later: Use
    later_hours: float
    peer: Peer


def held_out_pods(
    pods: Mapping[str, PodSeries], gpu_product: str, early_seconds: float = EARLY_SECONDS
) -> list[HeldOut]:
    """The pods with a usable first hour and enough use after it, in name order."""
    cap = capacity_of(gpu_product, 1)
    out = []
    for name, (ct, cv, mt, mv) in sorted(pods.items()):
        whole = UtilizationSeries("trace", name, cv, mv, 0.0, compute_times=ct, memory_times=mt)
        cut = split(whole, cap, early_seconds)
        if cut.early is None or cut.later is None or not ct or not mt:
            continue
        start = min(ct[0], mt[0])
        end = start + early_seconds
        early_c = [(t, v) for t, v in zip(ct, cv, strict=True) if t <= end]
        early_m = [(t, v) for t, v in zip(mt, mv, strict=True) if t <= end]
        early_series = UtilizationSeries(
            "trace",
            name,
            [v for _, v in early_c],
            [v for _, v in early_m],
            max(t for t, _ in early_c + early_m) - start,
            compute_times=[t for t, _ in early_c],
            memory_times=[t for t, _ in early_m],
        )
        hours = (max(ct[-1], mt[-1]) - end) / 3600
        out.append(HeldOut(name, early_series, cut.later, hours, Peer((), cut.early, cut.later)))
    return out


def _capped(rec: Recommendation | None, request: Size) -> Size:
    return request if rec is None else _capped_size(rec.recommended, request)


def _capped_size(size: Size, request: Size) -> Size:
    return request if size.gpu_share >= request.gpu_share else size


def _exceeds(size: Size, later: Use) -> bool:
    return later.memory_peak_mib > size.memory_mib or later.compute_high_gpus > size.compute_gpus + 1e-9


def _score(pods: Sequence[HeldOut], sizes: Sequence[Size], request: Size) -> tuple[float, float]:
    """(savings fraction, exceed fraction) of advising `sizes`."""
    total = sum(float(request.gpu_share) * p.later_hours for p in pods)
    pairs = list(zip(pods, sizes, strict=True))
    freed = sum(float(request.gpu_share - s.gpu_share) * p.later_hours for p, s in pairs)
    exceed = sum(1 for p, s in pairs if _exceeds(s, p.later))
    return (freed / total if total else 0.0), (exceed / len(pods) if pods else 0.0)


def hull_at(points: Sequence[tuple[float, float]], savings: float) -> float:
    """The lowest exceed fraction reachable at `savings` by mixing points (savings, exceed) of a curve and
    the request (0, 0); nan beyond the curve's largest savings."""
    pts = sorted({(0.0, 0.0), *points})
    best = math.inf
    for s1, e1 in pts:
        for s2, e2 in pts:
            if s1 <= savings <= s2:
                w = 0.0 if s2 == s1 else (savings - s1) / (s2 - s1)
                best = min(best, e1 + w * (e2 - e1))
    return best if math.isfinite(best) else math.nan


@dataclass(frozen=True)
class UsageEvaluation:
    pods: int
    fallbacks: int
    savings: float
    exceed: float
    baseline_exceed_at_same_savings: float
    memory_coverage: float
    compute_coverage: float
    joint_coverage: float
    rule_default_savings: float
    rule_default_exceed: float
    model_exceed_at_rule_savings: float
    rule_memory_coverage: float
    oracle_savings: float  # sized on each pod's actual later use: what no advice can beat without exceeding
    model_curve: tuple[tuple[float, float, float], ...]  # (level, savings, exceed)
    rule_curve: tuple[tuple[float, float, float], ...]  # (margin, savings, exceed)

    def figures(self) -> dict[str, float | int | None]:
        """bench/optimizer.py's keys (None: the model's curve does not reach the rule's savings)."""
        return {
            "rightsize_exceed_fraction": round(self.exceed, 4),
            "rightsize_exceed_fraction_baseline": _rounded(self.baseline_exceed_at_same_savings),
            "rightsize_exceed_fraction_request": 0.0,
            "rightsize_savings_fraction": round(self.savings, 4),
            "rightsize_p90_coverage": round(min(self.memory_coverage, self.compute_coverage), 4),
            "rightsize_p90_coverage_memory": round(self.memory_coverage, 4),
            "rightsize_p90_coverage_compute": round(self.compute_coverage, 4),
            "rightsize_p90_coverage_joint": round(self.joint_coverage, 4),
            "rightsize_rule_savings_fraction": round(self.rule_default_savings, 4),
            "rightsize_rule_exceed_fraction": round(self.rule_default_exceed, 4),
            "rightsize_exceed_fraction_at_rule_savings": _rounded(self.model_exceed_at_rule_savings),
            "rightsize_oracle_savings_fraction": round(self.oracle_savings, 4),
            "rightsize_pods_held_out": self.pods,
            "rightsize_fallbacks": self.fallbacks,
        }


def evaluate_usage(
    pods: Mapping[str, PodSeries],
    *,
    gpu_product: str = DEFAULT_PRODUCT,
    early_seconds: float = EARLY_SECONDS,
    level: float = LEVEL,
    levels: Sequence[float] = MODEL_LEVELS,
    margins: Sequence[float] = RULE_MARGINS,
) -> UsageEvaluation:
    """Leave-one-out over the pods of a trace without labels (every pod in one group: the cluster).
    `levels` and `margins` trace the model's and the rule's curves (the rule's must include MARGIN)."""
    held = held_out_pods(pods, gpu_product, early_seconds)
    if len(held) < 2:
        raise ValueError(f"{len(held)} pod(s) with a first hour and a later use: nothing to hold out")
    request = size_of(gpu_product, WHOLE, 1)

    def model_sizes(at: float) -> tuple[list[Size], list[tuple[float, float]], int]:
        sizes, bounds, fallbacks = [], [], 0
        for i, p in enumerate(held):
            model = UsageModel(
                tuple(q.peer for j, q in enumerate(held) if j != i), level=at, early_seconds=early_seconds
            )
            rec, pred = advise(p.early_series, (), gpu_product, request, model)
            fallbacks += not pred.from_model
            sizes.append(_capped(rec, request))
            bounds.append((pred.memory.at(at), pred.compute.at(at)))
        return sizes, bounds, fallbacks

    sizes, bounds, fallbacks = model_sizes(level)
    savings, exceed = _score(held, sizes, request)
    mem_cov = sum(p.later.memory_peak_mib <= b[0] for p, b in zip(held, bounds, strict=True)) / len(held)
    comp_cov = sum(p.later.compute_high_gpus <= b[1] + 1e-9 for p, b in zip(held, bounds, strict=True)) / len(
        held
    )
    joint = sum(
        p.later.memory_peak_mib <= b[0] and p.later.compute_high_gpus <= b[1] + 1e-9
        for p, b in zip(held, bounds, strict=True)
    ) / len(held)

    rule_curve = []
    for margin in sorted({*margins, MARGIN}):
        rule_sizes = [
            _capped(recommend(p.early_series, gpu_product, request, margin=margin), request) for p in held
        ]
        rule_curve.append((margin, *_score(held, rule_sizes, request)))
    default = next(c for c in rule_curve if c[0] == MARGIN)
    rule_mem_cov = sum(
        p.later.memory_peak_mib
        <= (rec.need_memory_mib if (rec := recommend(p.early_series, gpu_product, request)) else 0.0)
        for p in held
    ) / len(held)

    oracle = [
        _capped_size(smallest_cover(gpu_product, p.later.compute_high_gpus, p.later.memory_peak_mib), request)
        for p in held
    ]
    model_curve = [(level, savings, exceed)]
    for q in levels:
        if q != level and bounds_at(len(held) - 1, q) and bounds_at(min(len(held) - 1, 20), q):
            model_curve.append((q, *_score(held, model_sizes(q)[0], request)))
    model_curve.sort()
    return UsageEvaluation(
        pods=len(held),
        fallbacks=fallbacks,
        savings=savings,
        exceed=exceed,
        baseline_exceed_at_same_savings=hull_at([(s, e) for _, s, e in rule_curve], savings),
        memory_coverage=mem_cov,
        compute_coverage=comp_cov,
        joint_coverage=joint,
        rule_default_savings=default[1],
        rule_default_exceed=default[2],
        model_exceed_at_rule_savings=hull_at([(s, e) for _, s, e in model_curve], default[1]),
        rule_memory_coverage=rule_mem_cov,
        oracle_savings=_score(held, oracle, request)[0],
        model_curve=tuple(model_curve),
        rule_curve=tuple(rule_curve),
    )


def _rounded(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def lines(ev: UsageEvaluation) -> tuple[str, ...]:
    """What `kgwe optimize report --traces` prints."""
    f = ev.figures()
    reach = f["rightsize_exceed_fraction_at_rule_savings"]
    return (
        f"genai-v2026, {ev.pods} pods held out one at a time, advice from each pod's first hour, every pod "
        "on one A100-80GB:",
        f"model (P90 bounds): saves {ev.savings:.1%} of GPU-hours, later use exceeds the advice for "
        f"{ev.exceed:.1%} of pods; today's rule at the same savings (best margin, mixed with the request): "
        f"{ev.baseline_exceed_at_same_savings:.1%}; the request: 0% at 0%",
        f"today's rule as shipped (p95/p90 + 15%): saves {ev.rule_default_savings:.1%}, exceeds for "
        f"{ev.rule_default_exceed:.1%}; the model at that saving: "
        + ("out of its reach" if reach is None else f"{reach:.1%}"),
        f"P90 bound holds for {ev.memory_coverage:.1%} of pods (peak memory), {ev.compute_coverage:.1%} "
        f"(p95 compute), both {ev.joint_coverage:.1%}; today's rule's memory need holds for "
        f"{ev.rule_memory_coverage:.1%}",
    )


def evaluate(data_dir: Path, quick: bool) -> Evaluation:
    """The registry's evaluator: leave-one-out on alibaba-genai-v2026 (`quick`: the first 60 pods)."""
    from kgwe.cost.datasets import genai_pod_series

    pods = genai_pod_series(data_dir)
    if quick:
        pods = dict(sorted(pods.items())[:60])
    ev = evaluate_usage(pods)
    figures = {k: v for k, v in ev.figures().items() if v is not None}
    return Evaluation(MODEL_NAME, figures, lines(ev))
