"""Plain data the cost engine works on: who held how much GPU where and when, and what nodes existed.

Times are timezone-aware UTC. Billing resolution is one second (like cloud per-second billing), so
intervals are stored and aggregated as integer epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from kgwe.errors import KgweError

WHOLE = "whole"
MIG = "mig"
SHARED = "shared"
KINDS = (WHOLE, MIG, SHARED)


def ensure_utc(value: datetime, what: str = "time") -> datetime:
    """Reject naive datetimes: a naive time in a billing system is a silent off-by-hours bug."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise KgweError(f"{what} must be timezone-aware (UTC), got naive {value.isoformat()}")
    return value.astimezone(UTC)


def to_epoch(value: datetime) -> int:
    return int(ensure_utc(value).timestamp())


def from_epoch(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


@dataclass(frozen=True)
class UsageInterval:
    """One pod holding GPU resources on one node over [start, end); end None = still open.

    kind: "whole" (nvidia.com/gpu, `count` GPUs), "mig" (`count` instances of `mig_profile`),
    "shared" (nvidia.com/gpu.shared, `count` × `gpu_milli`/1000 of a GPU).
    """

    pod: str
    namespace: str
    team: str
    node: str
    gpu_product: str
    kind: str
    count: int
    start: datetime
    end: datetime | None = None
    mig_profile: str | None = None
    gpu_milli: int | None = None
    spot: bool = False
    pod_uid: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise KgweError(f"usage kind must be one of {KINDS}, got {self.kind!r}")
        if self.count <= 0:
            raise KgweError(f"usage count must be positive, got {self.count}")
        if self.kind == MIG and not self.mig_profile:
            raise KgweError("a MIG usage interval needs mig_profile")
        if self.kind == SHARED and not (self.gpu_milli and 0 < self.gpu_milli <= 1000):
            raise KgweError(f"a shared usage interval needs gpu_milli in 1..1000, got {self.gpu_milli}")
        object.__setattr__(self, "start", ensure_utc(self.start, "start"))
        if self.end is not None:
            object.__setattr__(self, "end", ensure_utc(self.end, "end"))
            if self.end < self.start:
                raise KgweError(f"usage interval of {self.namespace}/{self.pod} ends before it starts")


@dataclass(frozen=True)
class NodeCapacity:
    """A GPU node's capacity over [start, end): what the cluster pays for whether used or not."""

    node: str
    gpu_product: str
    gpu_count: int
    start: datetime
    end: datetime | None = None
    spot: bool = False

    def __post_init__(self) -> None:
        if self.gpu_count < 0:
            raise KgweError(f"node {self.node}: gpu_count must be >= 0")
        object.__setattr__(self, "start", ensure_utc(self.start, "start"))
        if self.end is not None:
            object.__setattr__(self, "end", ensure_utc(self.end, "end"))


@dataclass(frozen=True)
class Period:
    """A half-open reporting window [since, until)."""

    since: datetime
    until: datetime
    label: str = field(default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "since", ensure_utc(self.since, "since"))
        object.__setattr__(self, "until", ensure_utc(self.until, "until"))
        if self.until <= self.since:
            raise KgweError(f"period must end after it starts ({self.since} .. {self.until})")
        if not self.label:
            object.__setattr__(self, "label", f"{self.since:%Y-%m-%d}_{self.until:%Y-%m-%d}")


def month_start(value: datetime) -> datetime:
    value = ensure_utc(value)
    return datetime(value.year, value.month, 1, tzinfo=UTC)


def next_month(value: datetime) -> datetime:
    start = month_start(value)
    return datetime(start.year + (start.month == 12), start.month % 12 + 1, 1, tzinfo=UTC)


def month_period(value: datetime) -> Period:
    start = month_start(value)
    return Period(start, next_month(start), label=f"{start:%Y-%m}")


def buckets(period: Period, granularity: str, now: datetime | None = None) -> list[tuple[str, int, int]]:
    """Split a period into (label, since_epoch, until_epoch) buckets: "day", "month" or "total".
    With `now`, buckets end at now and buckets entirely after it are dropped: nothing is charged
    for time that has not happened yet (not even a closed interval recorded with a future end)."""
    if now is not None:
        cut = to_epoch(now)
        return [(label, lo, min(hi, cut)) for label, lo, hi in buckets(period, granularity) if lo < cut]
    since, until = to_epoch(period.since), to_epoch(period.until)
    if granularity == "total":
        return [(period.label, since, until)]
    out: list[tuple[str, int, int]] = []
    cursor = period.since
    while cursor < period.until:
        if granularity == "day":
            day = datetime(cursor.year, cursor.month, cursor.day, tzinfo=UTC)
            nxt, label = day + timedelta(days=1), f"{day:%Y-%m-%d}"
        elif granularity == "month":
            nxt, label = next_month(cursor), f"{cursor:%Y-%m}"
        else:
            raise KgweError(f"granularity must be day, month or total, got {granularity!r}")
        out.append((label, to_epoch(cursor), to_epoch(min(nxt, period.until))))
        cursor = nxt
    return out
