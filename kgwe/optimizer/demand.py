"""MIG demand ahead of the queue (decision 1): what a pool's pods will hold per MIG profile over the next
hours, from the demand they held and asked for before. Pure.

The model is deliberately small: over the recent past (the demand record's week in the controller, the
minutes already replayed in the benchmark), each profile's share of the compute slices pods held or waited
for (the mix), and its peak instances with a margin (the level). The rebalancing rule
(kgwe.planner.rebalance.Outlook) prepares idle GPUs for that mix before pods queue, and keeps the layout
while the outlook expects the demand, instead of following each rise and fall. What was tried and why this
is what the data supports: docs/optimizer.md.

Bad input: no demand measured, or fewer than MIN_MINUTES of it — no outlook, and the rule is today's; a
profile no GPU of the pool offers is left out; a negative or absurd count is dropped.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kgwe.gpu import catalog
from kgwe.planner.rebalance import Outlook

NAME = "mig-demand"
VERSION = 1
WINDOW_MINUTES = 7 * 24 * 60  # the demand record's week
MIN_MINUTES = 10  # less measured demand than this is no outlook
LEVEL_MARGIN = 0.25  # the level is the window's peak instances plus this much
MAX_INSTANCES = 1_000_000  # a count above this is not a measurement


def profile_slices() -> dict[str, int]:
    """Compute slices of every MIG profile name (its size on the first catalog model offering it)."""
    out: dict[str, int] = {}
    for model in catalog.mig_models():
        for name, profile in model.profiles.items():
            out.setdefault(name, profile.compute_slices)
    return out


@dataclass(frozen=True)
class DemandModel:
    """Per profile: `level` (peak instances with the margin) and `mix` (share of compute-slice-minutes),
    over `minutes` of measured demand."""

    level: Mapping[str, int]
    mix: Mapping[str, float]
    minutes: int

    def outlook(
        self, profiles: Iterable[str] | None = None, scale: Mapping[str, float] | None = None
    ) -> Outlook:
        """The outlook for a pool offering `profiles` (all when None); `scale` is the pool's part of each
        profile's demand when several pools offer it (1 when not given)."""
        keep = set(profiles) if profiles is not None else set(self.mix) | set(self.level)
        share = scale or {}
        level = {p: math.ceil(n * share.get(p, 1.0)) for p, n in self.level.items() if p in keep}
        mix = {p: v * share.get(p, 1.0) for p, v in self.mix.items() if p in keep}
        hours = self.minutes / 60
        span = f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"
        return Outlook(
            {p: n for p, n in level.items() if n > 0},
            {p: v for p, v in mix.items() if v > 0},
            f"from {span} of measured MIG demand",
        )

    def to_params(self) -> dict[str, Any]:
        return {
            "level": dict(sorted(self.level.items())),
            "mix": dict(sorted(self.mix.items())),
            "minutes": self.minutes,
        }

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> DemandModel | None:
        try:
            level = {str(p): int(n) for p, n in dict(params["level"]).items() if 0 < int(n) <= MAX_INSTANCES}
            mix = {
                str(p): float(v)
                for p, v in dict(params["mix"]).items()
                if math.isfinite(float(v)) and float(v) > 0
            }
            return cls(level, mix, max(0, int(params["minutes"])))
        except (KeyError, TypeError, ValueError):
            return None


def clean(sample: Mapping[str, int]) -> dict[str, int]:
    """A measurement without what cannot be one (negative, absurd, not a whole number)."""
    out = {}
    for p, n in sample.items():
        if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_INSTANCES:
            out[str(p)] = n
    return out


def fit(series: Sequence[Mapping[str, int]], slices: Mapping[str, int] | None = None) -> DemandModel | None:
    """The model over the last WINDOW_MINUTES of per-minute demand (oldest first); None with fewer than
    MIN_MINUTES or no demand at all."""
    window = series[-WINDOW_MINUTES:]
    if len(window) < MIN_MINUTES:
        return None
    sizes = slices or profile_slices()
    peak: Counter[str] = Counter()
    slice_minutes: Counter[str] = Counter()
    for raw in window:
        for p, n in clean(raw).items():
            if p not in sizes:
                continue
            peak[p] = max(peak[p], n)
            slice_minutes[p] += n * sizes[p]
    total = sum(slice_minutes.values())
    if total == 0:
        return None
    level = {p: math.ceil(n * (1 + LEVEL_MARGIN)) for p, n in sorted(peak.items())}
    mix = {p: v / total for p, v in sorted(slice_minutes.items())}
    return DemandModel(level, mix, len(window))


def series_from_intervals(
    intervals: Iterable[tuple[str, int, float, float | None]], since: float, until: float, step_s: int = 60
) -> list[dict[str, int]]:
    """Per-step MIG instances held, from (profile, count, start s, end s or None = still held) intervals,
    over [since, until) (epoch seconds): the demand record's pods as the series `fit` reads. An interval
    that ends before it starts, or a count below 1, is not demand."""
    steps = max(0, int((until - since) // step_s))
    delta: dict[str, list[int]] = {}
    for profile, count, start, end in intervals:
        stop = until if end is None else end
        if count < 1 or stop <= start or stop <= since or start >= until:
            continue
        row = delta.setdefault(profile, [0] * (steps + 1))
        row[max(0, int((start - since) // step_s))] += count
        row[min(steps, max(0, math.ceil((stop - since) / step_s)))] -= count
    out: list[dict[str, int]] = [{} for _ in range(steps)]
    for profile, row in delta.items():
        level = 0
        for i in range(steps):
            level += row[i]
            if level > 0:
                out[i][profile] = level
    return out


def pool_outlooks(
    model: DemandModel, pools: Sequence[tuple[str, frozenset[str], Mapping[str, int]]]
) -> dict[str, Outlook]:
    """The outlook of each pool (name, profiles its GPUs offer, instances its pods hold now): a profile
    several pools offer is split by what each holds of it now (evenly when none holds any)."""
    offering: dict[str, list[str]] = {}
    for name, profiles, _ in pools:
        for p in profiles:
            offering.setdefault(p, []).append(name)
    held = {name: h for name, _, h in pools}
    out = {}
    for name, profiles, _ in pools:
        scale = {}
        for p in profiles:
            others = offering[p]
            total = sum(held[o].get(p, 0) for o in others)
            scale[p] = held[name].get(p, 0) / total if total else 1 / len(others)
        out[name] = model.outlook(profiles, scale)
    return out


def forecaster(slices: Mapping[str, int] | None = None):  # type: ignore[no-untyped-def]
    """The benchmark's forecaster (kgwe.sim.mig_rebalance.Forecaster): the outlook from the minutes
    replayed so far, refitted at each evaluation."""
    sizes = dict(slices or profile_slices())

    def outlook(measured: Sequence[Mapping[str, int]]) -> Outlook | None:
        model = fit(measured, sizes)
        return None if model is None else model.outlook()

    return outlook


@dataclass(frozen=True)
class HeldOut:
    """How a model fitted on the past did on the demand that followed: the share of minutes each profile's
    demand stayed at or under its level (weighted by slices), and how far the mix was from the one that
    came (total variation distance, 0 = the same mix, 1 = disjoint)."""

    minutes: int
    level_coverage: float
    mix_distance: float

    def metrics(self) -> dict[str, float]:
        return {
            "held_out_minutes": float(self.minutes),
            "level_coverage": round(self.level_coverage, 4),
            "mix_distance": round(self.mix_distance, 4),
        }


def held_out(
    model: DemandModel, after: Sequence[Mapping[str, int]], slices: Mapping[str, int] | None = None
) -> HeldOut:
    """Score `model` on the per-minute demand `after` the data it was fitted on."""
    sizes = slices or profile_slices()
    under = weight = 0.0
    seen: Counter[str] = Counter()
    for raw in after:
        for p, n in clean(raw).items():
            size = sizes.get(p, 0)
            weight += size
            under += size if n <= model.level.get(p, 0) else 0
            seen[p] += n * size
    total = sum(seen.values())
    came = {p: v / total for p, v in seen.items()} if total else {}
    distance = 0.5 * sum(abs(model.mix.get(p, 0.0) - came.get(p, 0.0)) for p in set(model.mix) | set(came))
    return HeldOut(len(after), under / weight if weight else 1.0, distance if total else 0.0)
