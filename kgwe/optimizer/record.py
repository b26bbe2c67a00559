"""A fitted model as KGWE keeps it: its parameters (plain JSON data, small) and its provenance — the data
window it was fitted on, how many samples, its scores on held-out data, and when it was fitted.

The controller refits each model on its own schedule and stores the record (kgwe.optimizer.store); a
prediction names the model it came from, and `kgwe optimize report` prints the records' held-out scores.
Decoding is strict and bounded: a record is read back from a database another process may have written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from kgwe.errors import KgweError
from kgwe.timestamps import format_rfc3339, parse_rfc3339

MAX_RECORD_BYTES = (
    1_000_000  # a model that needs more than this is not small enough to refit in the controller
)
MAX_NAME_CHARS = 63
MAX_NOTES = 32
MAX_NOTE_CHARS = 512
MAX_METRICS = 64


class ModelRecordError(KgweError):
    """A stored record that cannot be used; the message says why."""


@dataclass(frozen=True)
class ModelRecord:
    """`name` is the model's (kgwe.optimizer.registry); `version` the format of its `params`, so code that
    meets a record of another version refits instead of misreading it; `since`/`until` the data window;
    `samples` the observations fitted on; `metrics` scores on data held out of the fit, each named with
    what it measures and against what (`mae_ratio_to_group_median`, `p90_coverage`); `notes` say what a
    person should know (a fallback in force, data dropped as absurd)."""

    name: str
    version: int
    fitted_at: datetime
    since: datetime | None
    until: datetime | None
    samples: int
    metrics: Mapping[str, float] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line: the model, its window, samples and held-out scores."""
        window = (
            f"{format_rfc3339(self.since)} .. {format_rfc3339(self.until)}"
            if self.since is not None and self.until is not None
            else "no data window"
        )
        scores = ", ".join(f"{k} {_show(v)}" for k, v in sorted(self.metrics.items())) or "no held-out scores"
        return (
            f"{self.name} v{self.version}: fitted {format_rfc3339(self.fitted_at)} on {self.samples} "
            f"sample(s), {window}; held out: {scores}"
        )

    def to_json(self) -> bytes:
        doc = {
            "name": self.name,
            "version": self.version,
            "fittedAt": format_rfc3339(self.fitted_at),
            "since": format_rfc3339(self.since) if self.since is not None else None,
            "until": format_rfc3339(self.until) if self.until is not None else None,
            "samples": self.samples,
            "metrics": {k: float(v) for k, v in sorted(self.metrics.items())},
            "params": self.params,
            "notes": list(self.notes),
        }
        data = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
        if len(data) > MAX_RECORD_BYTES:
            raise ModelRecordError(
                f"model {self.name}: {len(data):,} bytes, over the {MAX_RECORD_BYTES:,} a record may hold"
            )
        return data

    @classmethod
    def from_json(cls, data: bytes | str) -> ModelRecord:
        """The record `to_json` wrote; ModelRecordError (never another exception) for anything else."""
        raw = data.encode() if isinstance(data, str) else data
        if len(raw) > MAX_RECORD_BYTES:
            raise ModelRecordError(f"model record of {len(raw):,} bytes, over {MAX_RECORD_BYTES:,}")
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ModelRecordError(f"model record is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ModelRecordError("model record is not a JSON object")
        name = doc.get("name")
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
            raise ModelRecordError(f"model record: name must be 1-{MAX_NAME_CHARS} characters")
        where = f"model record {name}"
        version, samples = doc.get("version"), doc.get("samples")
        if (
            not isinstance(version, int)
            or not isinstance(samples, int)
            or not _is_int(version)
            or samples < 0
        ):
            raise ModelRecordError(f"{where}: version and samples must be whole numbers (samples ≥ 0)")
        fitted = _time(doc.get("fittedAt"), f"{where}: fittedAt")
        if fitted is None:
            raise ModelRecordError(f"{where}: fittedAt is required")
        metrics = doc.get("metrics") or {}
        if not isinstance(metrics, dict) or len(metrics) > MAX_METRICS:
            raise ModelRecordError(f"{where}: metrics must be an object of at most {MAX_METRICS} numbers")
        clean: dict[str, float] = {}
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ModelRecordError(f"{where}: metrics.{key} is not a finite number")
            clean[str(key)] = float(value)
        params = doc.get("params") or {}
        if not isinstance(params, dict):
            raise ModelRecordError(f"{where}: params must be an object")
        notes = doc.get("notes") or []
        if (
            not isinstance(notes, list)
            or len(notes) > MAX_NOTES
            or not all(isinstance(n, str) for n in notes)
        ):
            raise ModelRecordError(f"{where}: notes must be at most {MAX_NOTES} strings")
        return cls(
            name=name,
            version=version,
            fitted_at=fitted,
            since=_time(doc.get("since"), f"{where}: since"),
            until=_time(doc.get("until"), f"{where}: until"),
            samples=samples,
            metrics=clean,
            params=params,
            notes=tuple(n[:MAX_NOTE_CHARS] for n in notes),
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _time(value: object, what: str) -> datetime | None:
    if value is None:
        return None
    parsed = parse_rfc3339(value) if isinstance(value, str) else None
    if parsed is None:
        raise ModelRecordError(f"{what}: {value!r} is not an RFC 3339 time")
    return parsed


def _show(v: float) -> str:
    return f"{v:.3f}" if abs(v) < 1000 else f"{v:,.0f}"
