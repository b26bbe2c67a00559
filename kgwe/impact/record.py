"""The demand record: what GPU pods asked for over a recent window, compact and anonymous
(docs/demand-record.md).

Pure: built from metering intervals (plain data) and encoded as one JSON document; decoding is strict and
bounded, so a record read from a pull request's repository cannot make `kgwe plan` read without limit.
No pod names and no images are kept: per pod only its arrival and end (seconds from the window's start), an
index into the request shapes and an index into the (namespace, team) pairs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import orjson

from kgwe.cost.usage import Period
from kgwe.errors import KgweError
from kgwe.vocab import API_VERSION, DEFAULT_REPORTS_PATH

KIND = "DemandRecord"
FORMAT_VERSION = 1
RECORD_NAME = "demand-record.json"  # beside gpu-inventory.yaml under the reports path
MAX_RECORD_BYTES = 2_000_000
DEFAULT_WINDOW_DAYS = 7
MAX_SHAPES = 4096
MAX_TEAMS = 4096
MAX_NAME_CHARS = 253
MAX_PODS_SEEN = 1_000_000_000  # pods one window may have seen before sampling
MAX_WINDOW_DAYS = 366
# Times a record may name: what the arithmetic on them (budget periods, windows) stays within.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)
KINDS = ("whole", "mig", "shared")  # as the metering store's interval kinds
PREFERENCES = ("None", "NVLinkOptimal", "SameNUMA", "SamePCIeSwitch")
# The fraction of the ±tolerance by which the record's GPU count per product may differ from the inventory's
# (nodes come and go during a week); beyond it the record is from another inventory.
INVENTORY_TOLERANCE = 0.10


class DemandRecordError(KgweError):
    """The record cannot be used; the message says why (missing, truncated, oversized, other inventory)."""


@dataclass(frozen=True)
class Shape:
    """One GPU request: `count` whole GPUs, `count` instances of `mig_profile`, or a `gpu_milli` share."""

    kind: str
    count: int
    mig_profile: str | None = None
    gpu_milli: int | None = None
    preference: str = "None"


@dataclass(frozen=True)
class DemandPod:
    """Seconds from the window's start; `end_s` None = still running when the window closed."""

    arrival_s: int
    end_s: int | None
    shape: int
    team: int


@dataclass(frozen=True)
class DemandRecord:
    cluster: str
    generated_at: datetime
    since: datetime
    until: datetime
    gpus_by_product: Mapping[str, int]  # the inventory the demand ran on (nodes open at `until`)
    nodes: int
    teams: tuple[tuple[str, str], ...]  # (namespace, team)
    shapes: tuple[Shape, ...]
    pods: tuple[DemandPod, ...]
    pods_seen: int  # before sampling
    notes: tuple[str, ...] = field(default=())

    @property
    def window_seconds(self) -> int:
        return int((self.until - self.since).total_seconds())

    @property
    def sampled_fraction(self) -> float:
        return len(self.pods) / self.pods_seen if self.pods and self.pods_seen else 1.0


# ---- building -----------------------------------------------------------------------------------------


def record_from_intervals(
    intervals: Iterable[Any],
    nodes: Iterable[Any],
    *,
    since: datetime,
    until: datetime,
    cluster: str,
    now: datetime | None = None,
) -> DemandRecord:
    """Group metering intervals (kgwe.cost.usage.UsageInterval) by pod into one demand entry each.

    A pod metered on several intervals (a restart, a second resource) arrives at its first start, ends at its
    last end and keeps its largest request. The metering store keeps no topology preference, so every shape
    says "None" (docs/demand-record.md)."""
    since_s, until_s = _epoch(since), _epoch(until)
    by_pod: dict[str, list[Any]] = {}  # [arrival, end, largest shape, (namespace, team)]
    for iv in intervals:
        key = getattr(iv, "pod_uid", "") or f"{iv.namespace}/{iv.pod}"
        start = _epoch(iv.start)
        end = None if iv.end is None else _epoch(iv.end)
        if start >= until_s or (end is not None and end <= since_s):
            continue
        shape = Shape(iv.kind, int(iv.count), iv.mig_profile, iv.gpu_milli)
        entry = by_pod.get(key)
        if entry is None:
            by_pod[key] = [start, end, shape, (iv.namespace, iv.team)]
            continue
        entry[0] = min(entry[0], start)
        entry[1] = None if end is None or entry[1] is None else max(entry[1], end)
        if _size(shape) > _size(entry[2]):
            entry[2] = shape
    shapes: dict[Shape, int] = {}
    teams: dict[tuple[str, str], int] = {}
    pods = []
    for start, end, shape, team in sorted(by_pod.values(), key=lambda e: (e[0], e[1] or until_s)):
        arrival = max(start, since_s) - since_s
        stop = None if end is None or end >= until_s else end - since_s
        pods.append(
            DemandPod(
                arrival, stop, shapes.setdefault(shape, len(shapes)), teams.setdefault(team, len(teams))
            )
        )
    gpus: dict[str, int] = {}
    count = 0
    for cap in nodes:
        if cap.gpu_count > 0 and (cap.end is None or _epoch(cap.end) >= until_s):
            gpus[cap.gpu_product] = gpus.get(cap.gpu_product, 0) + cap.gpu_count
            count += 1
    return DemandRecord(
        cluster=cluster,
        generated_at=(now or until).astimezone(UTC),
        since=since.astimezone(UTC),
        until=until.astimezone(UTC),
        gpus_by_product=dict(sorted(gpus.items())),
        nodes=count,
        teams=tuple(teams),
        shapes=tuple(shapes),
        pods=tuple(pods),
        pods_seen=len(pods),
        notes=("topology preference is not metered: every shape records None",),
    )


def _size(shape: Shape) -> int:
    if shape.kind == "shared":
        return shape.count * (shape.gpu_milli or 0)
    return shape.count * 1000


# ---- encoding -----------------------------------------------------------------------------------------


def encode(record: DemandRecord, *, max_bytes: int = MAX_RECORD_BYTES) -> bytes:
    """Compact JSON; beyond `max_bytes` a deterministic sample of the pods is kept and the record says so."""
    data = _dumps(record)
    if len(data) <= max_bytes:
        return data
    ranked = sorted(range(len(record.pods)), key=lambda i: hashlib.blake2b(i.to_bytes(8, "big")).digest())
    keep = len(record.pods) * max_bytes // len(data)
    while keep > 0:
        chosen = sorted(ranked[:keep])
        pods = tuple(record.pods[i] for i in chosen)
        note = (
            f"sampled: {len(pods)} of {record.pods_seen} pods kept to stay within {max_bytes} bytes; "
            "the replay scales the inventory by the same fraction"
        )
        sampled = DemandRecord(**{**record.__dict__, "pods": pods, "notes": (*record.notes, note)})
        data = _dumps(sampled)
        if len(data) <= max_bytes:
            return data
        keep = keep * 9 // 10
    raise DemandRecordError(f"demand record header alone exceeds {max_bytes} bytes")


def _dumps(r: DemandRecord) -> bytes:
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "version": FORMAT_VERSION,
        "cluster": r.cluster,
        "generatedAt": _iso(r.generated_at),
        "since": _iso(r.since),
        "until": _iso(r.until),
        "inventory": {"nodes": r.nodes, "gpus": dict(r.gpus_by_product)},
        "podsSeen": r.pods_seen,
        "notes": list(r.notes),
        "teams": [list(t) for t in r.teams],
        "shapes": [[s.kind, s.count, s.mig_profile, s.gpu_milli, s.preference] for s in r.shapes],
        "pods": [[p.arrival_s, -1 if p.end_s is None else p.end_s, p.shape, p.team] for p in r.pods],
    }
    # one pod per line keeps Git diffs of refreshed records readable
    head = orjson.dumps({k: v for k, v in doc.items() if k != "pods"})
    rows = b",\n".join(orjson.dumps(p) for p in doc["pods"])
    return head[:-1] + b',"pods":[\n' + rows + b"\n]}\n"


# ---- decoding -----------------------------------------------------------------------------------------


def decode(data: bytes, *, where: str = "demand record", max_bytes: int = MAX_RECORD_BYTES) -> DemandRecord:
    """Strict: every field checked, every index in range; DemandRecordError naming `where` and the reason."""
    if len(data) > max_bytes:
        raise DemandRecordError(f"{where}: {len(data)} bytes is over the {max_bytes}-byte bound; refused")
    if not data.strip():
        raise DemandRecordError(f"{where}: empty")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DemandRecordError(f"{where}: not complete JSON (truncated?): {exc}") from None
    if not isinstance(doc, dict):
        raise DemandRecordError(f"{where}: expected a JSON object")
    if doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
        raise DemandRecordError(f"{where}: not a {API_VERSION} {KIND}")
    if doc.get("version") != FORMAT_VERSION:
        raise DemandRecordError(f"{where}: format version {doc.get('version')!r}, expected {FORMAT_VERSION}")
    since, until = _time(doc, "since", where), _time(doc, "until", where)
    if until <= since:
        raise DemandRecordError(f"{where}: until must be after since")
    if until - since > timedelta(days=MAX_WINDOW_DAYS):
        raise DemandRecordError(f"{where}: the window is longer than {MAX_WINDOW_DAYS} days")
    window = int((until - since).total_seconds())
    inv = _get(doc, "inventory", dict, where)
    gpus = _get(inv, "gpus", dict, where, "inventory.")
    for product, n in gpus.items():
        if not isinstance(product, str) or len(product) > MAX_NAME_CHARS or not _count(n):
            raise DemandRecordError(f"{where}: inventory.gpus: bad entry {product!r}: {n!r}")
    teams = _get(doc, "teams", list, where)
    if len(teams) > MAX_TEAMS:
        raise DemandRecordError(f"{where}: {len(teams)} teams is over the bound of {MAX_TEAMS}")
    for i, t in enumerate(teams):
        if not (isinstance(t, list) and len(t) == 2 and all(_name(x) for x in t)):
            raise DemandRecordError(f"{where}: teams[{i}]: expected [namespace, team]")
    shapes = [_shape(s, i, where) for i, s in enumerate(_get(doc, "shapes", list, where))]
    if len(shapes) > MAX_SHAPES:
        raise DemandRecordError(f"{where}: {len(shapes)} shapes is over the bound of {MAX_SHAPES}")
    pods = []
    for i, p in enumerate(_get(doc, "pods", list, where)):
        if not (isinstance(p, list) and len(p) == 4 and all(type(x) is int for x in p)):
            raise DemandRecordError(f"{where}: pods[{i}]: expected [arrival, end, shape, team] integers")
        arrival, end, shape, team = p
        if not 0 <= arrival <= window or not (end == -1 or arrival <= end <= window):
            raise DemandRecordError(f"{where}: pods[{i}]: times outside the window 0..{window} s")
        if not 0 <= shape < len(shapes) or not 0 <= team < len(teams):
            raise DemandRecordError(f"{where}: pods[{i}]: shape or team index out of range")
        pods.append(DemandPod(arrival, None if end == -1 else end, shape, team))
    seen = doc.get("podsSeen")
    if type(seen) is not int or not len(pods) <= seen <= MAX_PODS_SEEN:
        raise DemandRecordError(
            f"{where}: podsSeen must be an integer from the number of pods up to {MAX_PODS_SEEN}"
        )
    notes = _get(doc, "notes", list, where)
    if not all(isinstance(n, str) and len(n) <= 1000 for n in notes) or len(notes) > 32:
        raise DemandRecordError(f"{where}: notes must be at most 32 short strings")
    nodes = inv.get("nodes")
    if type(nodes) is not int or nodes < 0:
        raise DemandRecordError(f"{where}: inventory.nodes must be a non-negative integer")
    cluster = doc.get("cluster")
    if not isinstance(cluster, str) or len(cluster) > MAX_NAME_CHARS:
        raise DemandRecordError(f"{where}: cluster must be a short string")
    return DemandRecord(
        cluster=cluster,
        generated_at=_time(doc, "generatedAt", where),
        since=since,
        until=until,
        gpus_by_product=gpus,
        nodes=nodes,
        teams=tuple((t[0], t[1]) for t in teams),
        shapes=tuple(shapes),
        pods=tuple(pods),
        pods_seen=seen,
        notes=tuple(notes),
    )


def check_inventory(record: DemandRecord, gpus_by_product: Mapping[str, int]) -> None:
    """DemandRecordError when the record was taken on another inventory (other GPU products, or counts
    differing by more than INVENTORY_TOLERANCE): its demand would not mean the same on this one."""

    def text(gpus: Mapping[str, int]) -> str:
        return ", ".join(f"{n} {p}" for p, n in sorted(gpus.items())) or "no GPUs"

    mismatch = set(record.gpus_by_product) != set(gpus_by_product) or any(
        abs(n - gpus_by_product[p]) > INVENTORY_TOLERANCE * max(n, gpus_by_product[p])
        for p, n in record.gpus_by_product.items()
    )
    if mismatch:
        raise DemandRecordError(
            f"demand record is from another inventory: it ran on {text(record.gpus_by_product)}, "
            f"the inventory has {text(gpus_by_product)}"
        )


def _shape(raw: object, i: int, where: str) -> Shape:
    where = f"{where}: shapes[{i}]"
    if not (isinstance(raw, list) and len(raw) == 5):
        raise DemandRecordError(f"{where}: expected [kind, count, migProfile, gpuMilli, preference]")
    kind, count, profile, milli, preference = raw
    if kind not in KINDS or type(count) is not int or not 1 <= count <= 64:
        raise DemandRecordError(f"{where}: kind must be one of {', '.join(KINDS)} with a count 1..64")
    if (kind == "mig") != (profile is not None) or (profile is not None and not _name(profile, 32)):
        raise DemandRecordError(f"{where}: a MIG profile name goes with kind mig, and only with it")
    if (kind == "shared") != (milli is not None) or (
        milli is not None and not (_count(milli) and milli <= 1000)
    ):
        raise DemandRecordError(f"{where}: gpuMilli 1..1000 goes with kind shared, and only with it")
    if preference not in PREFERENCES:
        raise DemandRecordError(f"{where}: preference must be one of {', '.join(PREFERENCES)}")
    return Shape(kind, count, profile, milli, preference)


_T = TypeVar("_T")


def _get(doc: Mapping[str, object], key: str, typ: type[_T], where: str, prefix: str = "") -> _T:
    value = doc.get(key)
    if not isinstance(value, typ):
        raise DemandRecordError(f"{where}: {prefix}{key}: missing or not a {typ.__name__}")
    return value


def _count(n: object) -> bool:
    return type(n) is int and n > 0


def _name(s: object, limit: int = MAX_NAME_CHARS) -> bool:
    return isinstance(s, str) and 0 < len(s) <= limit


def _time(doc: Mapping[str, object], key: str, where: str) -> datetime:
    raw = doc.get(key)
    try:
        value = datetime.fromisoformat(raw) if isinstance(raw, str) and len(raw) <= 40 else None
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise DemandRecordError(f"{where}: {key}: expected an ISO 8601 UTC time, got {raw!r}")
    if not EARLIEST <= value <= LATEST:
        raise DemandRecordError(f"{where}: {key}: {raw!r} is not between {EARLIEST:%Y} and {LATEST:%Y}")
    return value.astimezone(UTC)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _epoch(t: datetime) -> int:
    return int(t.timestamp())


def window_ending(now: datetime, days: int = DEFAULT_WINDOW_DAYS) -> tuple[datetime, datetime]:
    """The default recording window: the `days` before `now` (UTC)."""
    now = now.astimezone(UTC)
    return now - timedelta(days=days), now


def gpus_of(names: Sequence[tuple[str, int]]) -> dict[str, int]:
    """GPU count per product from (product, gpus) pairs (one per node)."""
    out: dict[str, int] = {}
    for product, n in names:
        if n > 0:
            out[product] = out.get(product, 0) + n
    return out


class UsageHistory(Protocol):
    """Where the metered usage of a window is read from (kgwe.cost.store.CostStore)."""

    def usage(self, window: Period) -> Iterable[Any]: ...

    def nodes(self, window: Period) -> Iterable[Any]: ...


def demand_record_file(store: UsageHistory, now: datetime, cluster: str) -> dict[str, str]:
    """The demand record of the last week as the file committed beside the cost reports, where `kgwe plan`'s
    impact replay finds it."""
    since, until = window_ending(now)
    window = Period(since, until)
    record = record_from_intervals(
        store.usage(window), store.nodes(window), since=since, until=until, cluster=cluster, now=now
    )
    return {f"{DEFAULT_REPORTS_PATH}/{RECORD_NAME}": encode(record).decode()}
