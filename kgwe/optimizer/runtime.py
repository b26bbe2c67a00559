"""How long a run will take, from similar finished runs (decision 3: runtime and cost at admission). Pure.

The model is a hierarchy of groups, from all runs down to the most specific key the caller gives (for a
GPUWorkload: all runs -> its runtime -> that runtime in its namespace -> and its GPU shape). Each group
keeps the quantiles of its runs' log-durations; a prediction starts from a prior (quantiles of public job
runtimes, docs/optimizer.md) and, level by level, moves towards each group that has runs, by the weight
n / (n + SHRINK) for a group of n runs: a group of 2 runs barely moves it, a group of 200 decides. This is
empirical-Bayes shrinkage on log-durations: it beat the group median on openb's held-out pods (MAE) where a
group has few runs, and gives P90 bounds that cover about 90% of them (docs/optimizer.md).

Why not more: the public traces give no more than a request shape and a class per run (openb) or nothing at
all (Philly); a linear quantile regression of the log-duration on the request shape (statsmodels QuantReg)
had 1.69 times the group median's error on the same held-out pods (docs/optimizer.md).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgwe.optimizer.prediction import Prediction
from kgwe.optimizer.scores import coverage, mae, quantile, ratio

NAME = "runtime"
VERSION = 1
QUANTITY = "duration_seconds"
LEVELS = (0.1, 0.5, 0.9)  # the quantiles kept per group and predicted
SHRINK = 3.0  # pseudo-runs of the level above that a group's own runs must outweigh
MIN_SECONDS = 1.0  # shorter runs are counted as one second (log of 0)
MAX_SECONDS = 366 * 86400.0  # longer is an absurd record, dropped (kgwe.optimizer.history)
MAX_GROUPS = 5_000  # groups kept per level (the most populous); fewer when the record would pass its bound
# The prior where a cluster has no finished run yet: quantiles of 83,154 Philly job runtimes (seconds,
# docs/optimizer.md), the only public per-job runtime sample without a cluster of its own to condition on.
PRIOR = {0.1: 61.0, 0.5: 1186.0, 0.9: 12859.0}
PRIOR_RUNS = 1.0  # the prior weighs as much as one run: a cluster's own history takes over at once


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy: `describe` says which runs a group holds, after "finished run(s)" in a
    reason, formatted with the key's parts by position ("of runtime {0} in {1}")."""

    name: str
    describe: str

    def text(self, key: Sequence[str]) -> str:
        try:
            return self.describe.format(*key)
        except (IndexError, KeyError, ValueError):
            return f"{self.describe} {' '.join(key)}"


@dataclass(frozen=True)
class Example:
    """One finished run: its keys, one per level below the root (most general first), and its duration."""

    keys: tuple[tuple[str, ...], ...]
    seconds: float


@dataclass(frozen=True)
class Group:
    runs: int
    logs: tuple[float, ...]  # log-seconds at LEVELS


@dataclass(frozen=True)
class RuntimeModel:
    """Groups per level (level 0 is every run, key ()); `levels` describe the levels below the root."""

    levels: tuple[Level, ...]
    groups: tuple[Mapping[tuple[str, ...], Group], ...]
    runs: int
    dropped: int = 0
    shrink: float = SHRINK
    notes: tuple[str, ...] = field(default=())

    def predict(self, keys: Sequence[tuple[str, ...]]) -> Prediction:
        """Duration quantiles for a run with `keys` (one per level, as in `Example.keys`); a fallback and
        its reason when no finished run is like it, never an exception."""
        est = [math.log(PRIOR[q]) for q in LEVELS]
        root = self.groups[0].get(()) if self.groups else None
        if root is None or root.runs == 0:
            return _prediction(
                est,
                reason="the prior: quantiles of public job runtimes",
                fallback="no finished run recorded yet: the prior from public job runtimes (median 1,186 s)",
                samples=0,
            )
        est = _toward(est, root, PRIOR_RUNS)
        said = f"all {root.runs} finished {_runs(root.runs)}"
        specific = 0
        for depth, (level, key) in enumerate(zip(self.levels, keys, strict=False), start=1):
            if depth >= len(self.groups):
                break
            group = self.groups[depth].get(tuple(key))
            if group is None or group.runs == 0:
                continue
            est = _toward(est, group, self.shrink)
            said = f"{group.runs} finished {_runs(group.runs)} {level.text(key)}"
            specific = group.runs
        if specific == 0:
            what = self.levels[0].text(keys[0]) if self.levels and keys else "like it"
            return _prediction(
                est,
                reason=f"from {said}",
                fallback=f"no finished run {what} yet: the median of all {said.removeprefix('all ')}",
                samples=root.runs,
            )
        return _prediction(est, reason=f"from {said} (of {root.runs} in all)", samples=specific)

    def to_params(self) -> dict[str, Any]:
        return {
            "levels": [[lv.name, lv.describe] for lv in self.levels],
            "quantiles": list(LEVELS),
            "shrink": self.shrink,
            "runs": self.runs,
            "dropped": self.dropped,
            "groups": [
                [[list(k), g.runs, list(g.logs)] for k, g in sorted(level.items())] for level in self.groups
            ],
        }

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> RuntimeModel | None:
        """The model `to_params` wrote; None for anything else (the caller falls back and says so)."""
        try:
            if list(params["quantiles"]) != list(LEVELS):
                return None
            levels = tuple(Level(str(n), str(d)) for n, d in params["levels"])
            groups = tuple(
                {
                    tuple(str(p) for p in k): Group(int(n), tuple(float(x) for x in logs))
                    for k, n, logs in level
                }
                for level in params["groups"]
            )
            if not groups or any(len(g.logs) != len(LEVELS) for level in groups for g in level.values()):
                return None
            shrink = float(params.get("shrink", SHRINK))
            if not math.isfinite(shrink) or shrink < 0:
                return None
            return cls(levels, groups, int(params["runs"]), int(params.get("dropped", 0)), shrink)
        except (KeyError, TypeError, ValueError):
            return None


def _runs(n: int) -> str:
    return "run" if n == 1 else "runs"


def _toward(est: list[float], group: Group, weight_above: float) -> list[float]:
    w = group.runs / (group.runs + weight_above)
    return [w * g + (1 - w) * e for g, e in zip(group.logs, est, strict=True)]


def _prediction(
    est: Sequence[float], *, reason: str, samples: int, fallback: str | None = None
) -> Prediction:
    quantiles = {q: math.exp(x) for q, x in zip(LEVELS, est, strict=True)}
    return Prediction.make(
        QUANTITY,
        quantiles[0.5],
        quantiles,
        reason=reason,
        fallback=fallback,
        samples=samples,
        model=NAME,
        floor=0.0,
    )


Z90 = 1.2815515655446004  # the standard normal's 0.9 quantile


def expected_seconds(pred: Prediction) -> float:
    """The mean duration of the log-normal through the prediction's P10 and P90.

    The mean is what orders a queue best (shortest expected job first) and what a budget expects to pay.
    Runtimes are skewed even on a log scale (a group's P90 lies further above its median than its P10 lies
    below), so the log-normal is fitted to the interval, not to the median: ordering openb's queue by this
    mean waits 0.19 of first-come-first-served, by the median 0.29 (docs/optimizer.md). With a very wide
    interval the mean lies above the P90: a few very long runs carry it."""
    p10, p90 = max(MIN_SECONDS, pred.at(LEVELS[0])), max(MIN_SECONDS, pred.at(LEVELS[-1]))
    sigma = max(0.0, (math.log(p90) - math.log(p10)) / (2 * Z90))
    return math.exp((math.log(p10) + math.log(p90)) / 2 + sigma * sigma / 2)


def usable(seconds: float) -> bool:
    """Whether a duration can be learned from: finite, not negative, not absurdly long."""
    return math.isfinite(seconds) and 0 <= seconds <= MAX_SECONDS


def fit(
    examples: Iterable[Example], levels: Sequence[Level], shrink: float = SHRINK, max_groups: int = MAX_GROUPS
) -> RuntimeModel:
    """Group the usable examples by level and keep each group's log-duration quantiles (the `max_groups`
    most populous groups per level); examples that are not usable (negative, absurd, not finite) are
    counted in `dropped` and said in a note."""
    depth = len(levels) + 1
    logs: list[dict[tuple[str, ...], list[float]]] = [{} for _ in range(depth)]
    runs = dropped = 0
    for ex in examples:
        if not usable(ex.seconds):
            dropped += 1
            continue
        runs += 1
        x = math.log(max(MIN_SECONDS, ex.seconds))
        logs[0].setdefault((), []).append(x)
        for d, key in enumerate(ex.keys[: depth - 1], start=1):
            logs[d].setdefault(tuple(key), []).append(x)
    groups: list[dict[tuple[str, ...], Group]] = []
    for level in logs:
        biggest = sorted(level.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:max_groups]
        groups.append({k: Group(len(v), tuple(quantile(v, q) for q in LEVELS)) for k, v in biggest})
    notes = (f"{dropped} run(s) dropped: negative, absurd or not finite durations",) if dropped else ()
    return RuntimeModel(tuple(levels), tuple(groups), runs, dropped, shrink, notes)


@dataclass(frozen=True)
class Scores:
    """Held-out scores of the model against the two baselines, on the same examples."""

    examples: int
    mae_seconds: float
    global_median_mae_seconds: float
    group_median_mae_seconds: float
    p90_coverage: float

    @property
    def mae_ratio_to_group_median(self) -> float:
        return ratio(self.mae_seconds, self.group_median_mae_seconds)

    @property
    def mae_ratio_to_global_median(self) -> float:
        return ratio(self.mae_seconds, self.global_median_mae_seconds)

    def metrics(self) -> dict[str, float]:
        return {
            "held_out_runs": float(self.examples),
            "mae_seconds": round(self.mae_seconds, 1),
            "mae_ratio_to_group_median": round(self.mae_ratio_to_group_median, 4),
            "mae_ratio_to_global_median": round(self.mae_ratio_to_global_median, 4),
            "p90_coverage": round(self.p90_coverage, 4),
        }


class OnlineHistory:
    """Finished runs as they become known, for an evaluation that predicts each run only from the runs
    that finished before it started (a rolling origin): the baselines and the model see the same past.

    Sorted log-durations per group make each prediction a few lookups; the model's groups are the same
    quantiles `fit` would compute on that past."""

    def __init__(self, levels: Sequence[Level], shrink: float = SHRINK) -> None:
        self.levels = tuple(levels)
        self.shrink = shrink
        self._logs: list[dict[tuple[str, ...], list[float]]] = [{} for _ in range(len(levels) + 1)]
        self._raw: list[dict[tuple[str, ...], list[float]]] = [{} for _ in range(len(levels) + 1)]

    @property
    def runs(self) -> int:
        return len(self._logs[0].get((), []))

    def add(self, ex: Example) -> None:
        if not usable(ex.seconds):
            return
        x = math.log(max(MIN_SECONDS, ex.seconds))
        for d, key in enumerate(((), *ex.keys[: len(self.levels)])):
            bisect.insort(self._logs[d].setdefault(tuple(key), []), x)
            bisect.insort(self._raw[d].setdefault(tuple(key), []), ex.seconds)

    def model(self, keys: Sequence[tuple[str, ...]]) -> RuntimeModel:
        """The model `fit` would give on the runs so far, restricted to the groups `keys` touch."""
        groups: list[dict[tuple[str, ...], Group]] = []
        for d, key in enumerate(((), *keys[: len(self.levels)])):
            values = self._logs[d].get(tuple(key))
            groups.append({tuple(key): Group(len(values), _sorted_quantiles(values))} if values else {})
        return RuntimeModel(self.levels, tuple(groups), self.runs, 0, self.shrink)

    def global_median(self) -> float:
        return _sorted_quantile(self._raw[0].get((), []), 0.5)

    def group_median(self, keys: Sequence[tuple[str, ...]]) -> float:
        """The median of the most specific group (the last level's key) when it has runs, else the global
        median: the rule a scheduler without a model would use."""
        depth = len(self.levels)
        if depth and len(keys) >= depth:
            values = self._raw[depth].get(tuple(keys[depth - 1]))
            if values:
                return _sorted_quantile(values, 0.5)
        return self.global_median()


def _sorted_quantiles(ordered: Sequence[float]) -> tuple[float, ...]:
    return tuple(_sorted_quantile(ordered, q) for q in LEVELS)


def _sorted_quantile(ordered: Sequence[float], level: float) -> float:
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * level
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Timed:
    """An example with when it started and when it ended (seconds on any clock)."""

    example: Example
    start: float
    end: float


def rolling_origin(
    timed: Sequence[Timed], levels: Sequence[Level], *, warmup: int = 50, shrink: float = SHRINK
) -> tuple[Scores, list[tuple[Timed, Prediction, float]]]:
    """Predict each run from the runs that ended before it started; score the model against the global and
    the group median (the same past). Returns the scores and, per scored run in start order, (the run, its
    prediction, its group median). The first `warmup` finished runs only teach."""
    history = OnlineHistory(levels, shrink)
    ends = sorted(timed, key=lambda t: t.end)
    j = 0
    actual: list[float] = []
    model: list[float] = []
    p90: list[float] = []
    glob: list[float] = []
    group: list[float] = []
    rows: list[tuple[Timed, Prediction, float]] = []
    for t in sorted(timed, key=lambda t: t.start):
        while j < len(ends) and ends[j].end <= t.start:
            history.add(ends[j].example)
            j += 1
        if history.runs < warmup or not usable(t.example.seconds):
            continue
        keys = t.example.keys
        pred = history.model(keys).predict(keys)
        gm = history.group_median(keys)
        actual.append(t.example.seconds)
        model.append(pred.value)
        p90.append(pred.at(0.9))
        glob.append(history.global_median())
        group.append(gm)
        rows.append((t, pred, gm))
    scores = Scores(
        len(actual), mae(actual, model), mae(actual, glob), mae(actual, group), coverage(actual, p90)
    )
    return scores, rows
