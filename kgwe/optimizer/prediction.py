"""What a model says about one quantity: its value, its uncertainty and a reason a person can check.

Every decision that uses a prediction reads `fallback` first: a prediction the model could not make (no
history, a kind never seen, absurd input) still carries a value, the one today's rule gives, and says which
rule that was and why. So a caller never needs a second code path for "no model".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_REASON_CHARS = 512  # a status field and an Event message hold it


@dataclass(frozen=True)
class Prediction:
    """`quantity` names what is predicted with its unit (`duration_seconds`, `instances`); `value` is the
    point estimate (the median unless the model says otherwise); `quantiles` maps a level in (0, 1) to the
    value below which the quantity falls with that probability (non-decreasing in the level); `samples` is
    how many observations the answer rests on; `fallback` is None when the model answered, else the rule
    used instead and why ("the global median of 412 runs: no finished run of runtime X yet")."""

    quantity: str
    value: float
    quantiles: Mapping[float, float] = field(default_factory=dict)
    reason: str = ""
    fallback: str | None = None
    samples: int = 0
    model: str = ""

    @classmethod
    def make(
        cls,
        quantity: str,
        value: float,
        quantiles: Mapping[float, float] | Iterable[tuple[float, float]] = (),
        *,
        reason: str = "",
        fallback: str | None = None,
        samples: int = 0,
        model: str = "",
        floor: float | None = None,
    ) -> Prediction:
        """A prediction with its quantiles made consistent: levels outside (0, 1) and values that are not
        finite are dropped, the values are made non-decreasing in the level (a running maximum), and every
        value (and `value`) is raised to `floor` when given (a duration is never negative)."""
        pairs = quantiles.items() if isinstance(quantiles, Mapping) else quantiles
        clean: dict[float, float] = {}
        top = -math.inf
        usable = ((float(q), float(x)) for q, x in pairs)
        for level, v in sorted((q, x) for q, x in usable if 0.0 < q < 1.0 and math.isfinite(x)):
            v = v if floor is None else max(floor, v)
            top = max(top, v)
            clean[level] = top
        point = float(value) if math.isfinite(float(value)) else clean.get(0.5, 0.0)
        if floor is not None:
            point = max(floor, point)
        return cls(
            quantity,
            point,
            clean,
            _bounded(reason),
            None if fallback is None else _bounded(fallback),
            max(0, int(samples)),
            model,
        )

    @property
    def from_model(self) -> bool:
        """Whether the model answered (False: `fallback` says what was used instead)."""
        return self.fallback is None

    def at(self, level: float) -> float:
        """The quantity at `level`, interpolated linearly between the known quantiles (the nearest one
        outside them; `value` when there are none)."""
        if not self.quantiles:
            return self.value
        levels = sorted(self.quantiles)
        if level <= levels[0]:
            return self.quantiles[levels[0]]
        if level >= levels[-1]:
            return self.quantiles[levels[-1]]
        for lo, hi in itertools.pairwise(levels):
            if lo <= level <= hi:
                w = (level - lo) / (hi - lo)
                return self.quantiles[lo] + w * (self.quantiles[hi] - self.quantiles[lo])
        return self.value  # unreachable: the levels cover `level`

    @property
    def why(self) -> str:
        """The one sentence to show: the fallback and its reason, or the model's reason."""
        return self.fallback if self.fallback is not None else self.reason

    def to_status(self) -> dict[str, Any]:
        """As a status field or JSON: `p50`, `p90`... by level, the reason, `fallback` when one was used."""
        out: dict[str, Any] = {"quantity": self.quantity, "value": _round(self.value)}
        for level, v in sorted(self.quantiles.items()):
            out[f"p{_percent(level)}"] = _round(v)
        out["samples"] = self.samples
        out["reason"] = self.reason
        if self.fallback is not None:
            out["fallback"] = self.fallback
        if self.model:
            out["model"] = self.model
        return out


def _percent(level: float) -> str:
    pct = level * 100
    return str(round(pct)) if abs(pct - round(pct)) < 1e-9 else f"{pct:g}".replace(".", "_")


def _round(v: float) -> float:
    return float(f"{v:.6g}")


def _bounded(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."
