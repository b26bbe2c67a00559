"""A bounded on-disk buffer of metering writes, for while the cost store is unreachable.

Metering must not lose a pod that starts and stops during a database outage, nor die because the
database was down when this replica became leader. The metering watch therefore keeps following pods
and appends every write it cannot make to this spool (JSON lines, one write each, fsynced per batch);
once the store answers, the spool is replayed in order and emptied. Replays are harmless: the store
ignores a Start whose holding is already open and an End whose interval is already closed, so each pod
is recorded exactly once. The file is capped (`max_records`); writes beyond the cap are dropped and
counted (`dropped`), and the next relist after recovery reconciles what is still live.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kgwe.cost.metering import End, Start
from kgwe.cost.usage import NodeCapacity, UsageInterval

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_D = TypeVar("_D", bound="DataclassInstance")  # a record the spool writes as JSON

DEFAULT_MAX_RECORDS = 100_000  # ~30 MB of JSON; a day of churn on a large cluster


@dataclasses.dataclass(frozen=True)
class NodeUp:
    capacity: NodeCapacity


@dataclasses.dataclass(frozen=True)
class NodeDown:
    node: str
    at: datetime


Write = Start | End | NodeUp | NodeDown


def _encode(obj: object) -> object:
    if isinstance(obj, datetime):
        return {"$t": obj.isoformat()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return obj


def _decode_fields(cls: type[_D], raw: Mapping[str, Any]) -> _D:
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        v = raw[f.name]
        values[f.name] = datetime.fromisoformat(v["$t"]) if isinstance(v, dict) and "$t" in v else v
    return cls(**values)


def encode(write: Write) -> str:
    kind = type(write).__name__
    if isinstance(write, Start):
        body = _encode(write.interval)
    elif isinstance(write, NodeUp):
        body = _encode(write.capacity)
    else:
        body = _encode(write)
    return json.dumps({"kind": kind, "body": body}, separators=(",", ":"))


def decode(line: str) -> Write:
    doc = json.loads(line)
    kind, body = doc["kind"], doc["body"]
    if kind == "Start":
        return Start(_decode_fields(UsageInterval, body))
    if kind == "NodeUp":
        return NodeUp(_decode_fields(NodeCapacity, body))
    if kind == "End":
        return _decode_fields(End, body)
    if kind == "NodeDown":
        return _decode_fields(NodeDown, body)
    raise ValueError(f"unknown spool record {kind!r}")


class Spool:
    """Append-only JSON-lines file of pending writes, at most `max_records` lines."""

    def __init__(self, path: Path, max_records: int = DEFAULT_MAX_RECORDS) -> None:
        self.path = Path(path)
        self.max_records = max_records
        self.dropped = 0
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._count = len(self._lines())

    def __len__(self) -> int:
        return self._count

    def _lines(self) -> list[str]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        return [line for line in text.splitlines() if line.strip()]

    def append(self, writes: Iterable[Write]) -> int:
        """Keep `writes` for later; returns how many were dropped because the spool is full."""
        with self._lock:
            room = self.max_records - self._count
            batch = list(writes)
            kept, lost = batch[: max(room, 0)], len(batch) - max(min(room, len(batch)), 0)
            if kept:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write("".join(encode(w) + "\n" for w in kept))
                    f.flush()
                    os.fsync(f.fileno())
                self._count += len(kept)
            self.dropped += lost
            return lost

    def pending(self) -> list[Write]:
        """Every kept write, oldest first (a torn last line from a crash is skipped)."""
        out = []
        for line in self._lines():
            try:
                out.append(decode(line))
            except (ValueError, KeyError, TypeError):
                continue
        return out

    def clear(self) -> None:
        with self._lock:
            self.path.unlink(missing_ok=True)
            self._count = 0
