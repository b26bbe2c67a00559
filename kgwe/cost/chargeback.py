"""Chargeback: price aggregated GPU-seconds and apportion the cluster's GPU cost, exactly.

Input is already aggregated (per bucket, node, resource shape and group key), so the same function
serves in-memory intervals (`aggregate_usage`) and SQL aggregates from the store. Conservation:
Σ line costs + Σ idle = cluster GPU cost for the period, to the cent, because every amount is an exact
Fraction until one final largest-remainder rounding of all cells against the rounded cluster total.

Cluster GPU cost = node capacity GPU-seconds × price, plus allocations on nodes with no capacity record
(priced as if the node existed only for them, with a warning). Idle = capacity cost − allocation cost,
per bucket; negative idle (more allocated than a node has) is kept and warned about, never hidden.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from kgwe import vocab
from kgwe.cost.allocate import cents_to_decimal, largest_remainder
from kgwe.cost.pricing import PriceBook
from kgwe.cost.usage import NodeCapacity, Period, UsageInterval, buckets, to_epoch
from kgwe.errors import KgweError

DIMENSIONS = ("team", "namespace", "gpu_product", "node", "pod")
IDLE_KEY = vocab.IDLE_KEY
# UsageAggregate.node for usage on nodes that have a capacity record in the bucket: aggregating those
# per node would make the aggregate nearly as large as the raw data, and only the distinction matters.
ON_INVENTORY = "*"
_HOUR = Fraction(3600)


@dataclass(frozen=True)
class UsageAggregate:
    """Σ overlap seconds × count for one bucket, node, resource shape and group key."""

    bucket: str
    node: str
    gpu_product: str
    spot: bool
    kind: str
    mig_profile: str | None
    gpu_milli: int | None
    key: tuple[str, ...]
    unit_seconds: int


# UsageAggregate's fields before unit_seconds: (bucket, node, product, spot, kind, mig profile, milli, key).
UsageShape = tuple[str, str, str, bool, str, str | None, int | None, tuple[str, ...]]


@dataclass(frozen=True)
class CapacityAggregate:
    bucket: str
    node: str
    gpu_product: str
    spot: bool
    gpu_seconds: int


@dataclass(frozen=True)
class ChargebackLine:
    bucket: str
    key: tuple[str, ...]
    gpu_hours: Decimal
    cost: Decimal
    idle_share: Decimal = Decimal("0.00")


@dataclass(frozen=True)
class IdleLine:
    bucket: str
    gpu_hours: Decimal
    cost: Decimal


@dataclass(frozen=True)
class Chargeback:
    period: Period
    granularity: str
    group_by: tuple[str, ...]
    currency: str
    idle_cost: str
    lines: tuple[ChargebackLine, ...]
    idle: tuple[IdleLine, ...]
    cluster_cost: Decimal
    cluster_gpu_hours: Decimal
    warnings: tuple[str, ...] = field(default=())

    @property
    def allocated_cost(self) -> Decimal:
        return sum((line.cost for line in self.lines), Decimal("0.00"))

    @property
    def idle_cost_total(self) -> Decimal:
        return sum((line.cost for line in self.idle), Decimal("0.00"))

    def totals_by(self, dimension: str) -> dict[str, Decimal]:
        """Roll lines up to one dimension of the group key across buckets (sums of cents: conserved)."""
        if dimension not in self.group_by:
            raise KgweError(f"chargeback was grouped by {self.group_by}, not {dimension!r}")
        index = self.group_by.index(dimension)
        out: dict[str, Decimal] = defaultdict(lambda: Decimal("0.00"))
        for line in self.lines:
            out[line.key[index]] += line.cost
        return dict(sorted(out.items()))


def check_group_by(group_by: Sequence[str]) -> tuple[str, ...]:
    bad = [d for d in group_by if d not in DIMENSIONS]
    if bad or not group_by:
        raise KgweError(f"group by must be some of {', '.join(DIMENSIONS)}, got {list(group_by)}")
    return tuple(group_by)


def _overlap(start: int, end: int, lo: int, hi: int) -> int:
    return max(0, min(end, hi) - max(start, lo))


def aggregate_usage(
    intervals: Iterable[UsageInterval],
    period: Period,
    granularity: str,
    group_by: Sequence[str],
    now: datetime,
    nodes: Iterable[NodeCapacity] = (),
) -> list[UsageAggregate]:
    """In-memory twin of the store's SQL aggregation (open intervals run until `now`). Usage on a node
    with capacity in the bucket is pooled under ON_INVENTORY, exactly as the SQL does."""
    group_by = check_group_by(group_by)
    cuts = buckets(period, granularity, now)
    now_s = to_epoch(now)
    covered = {(c.bucket, c.node) for c in aggregate_capacity(nodes, period, granularity, now)}
    starts = [lo for _, lo, _ in cuts]
    sums: dict[UsageShape, int] = defaultdict(int)
    for iv in intervals:
        start = to_epoch(iv.start)
        end = to_epoch(iv.end) if iv.end is not None else now_s
        key = tuple(str(getattr(iv, d)) for d in group_by)
        for label, lo, hi in cuts[max(0, bisect.bisect_right(starts, start) - 1) :]:
            if lo >= end:
                break
            seconds = _overlap(start, end, lo, hi)
            if seconds:
                node = ON_INVENTORY if (label, iv.node) in covered else iv.node
                shape = (label, node, iv.gpu_product, iv.spot, iv.kind, iv.mig_profile, iv.gpu_milli, key)
                sums[shape] += seconds * iv.count
    return [UsageAggregate(*shape, unit_seconds=s) for shape, s in sorted(sums.items(), key=repr)]


def aggregate_capacity(
    nodes: Iterable[NodeCapacity], period: Period, granularity: str, now: datetime
) -> list[CapacityAggregate]:
    cuts = buckets(period, granularity, now)
    now_s = to_epoch(now)
    sums: dict[tuple[str, str, str, bool], int] = defaultdict(int)
    for n in nodes:
        start = to_epoch(n.start)
        end = to_epoch(n.end) if n.end is not None else now_s
        for label, lo, hi in cuts:
            seconds = _overlap(start, end, lo, hi)
            if seconds and n.gpu_count:
                sums[(label, n.node, n.gpu_product, n.spot)] += seconds * n.gpu_count
    return [CapacityAggregate(*k, gpu_seconds=s) for k, s in sorted(sums.items(), key=repr)]


def compute_chargeback(
    usage: Iterable[UsageAggregate],
    capacity: Iterable[CapacityAggregate],
    book: PriceBook,
    period: Period,
    granularity: str,
    group_by: Sequence[str],
) -> Chargeback:
    """Price, apportion idle and round once. Pure: same aggregates, same cents."""
    group_by = check_group_by(group_by)
    warnings: set[str] = set()

    rates: dict[tuple[str, bool], Fraction] = {}
    shares: dict[tuple, Fraction] = {}

    def rate(product: str, spot: bool) -> Fraction:
        if (product, spot) not in rates:
            price = book.price(product)
            if price is None:
                warnings.add(f"no price for GPU product {product!r}: its GPU-hours are counted at 0")
                rates[(product, spot)] = Fraction(0)
            else:
                rates[(product, spot)] = Fraction(price.per_hour(spot)) / _HOUR
        return rates[(product, spot)]

    def share_of(u: UsageAggregate) -> Fraction:
        shape = (u.gpu_product, u.kind, u.mig_profile, u.gpu_milli)
        if shape not in shares:
            try:
                shares[shape] = book.gpu_share(*shape)
            except KgweError as exc:
                warnings.add(f"{exc}: those GPU-hours are counted at 0")
                shares[shape] = Fraction(0)
        return shares[shape]

    cap_cost: dict[str, Fraction] = defaultdict(Fraction)
    cap_seconds: dict[str, Fraction] = defaultdict(Fraction)
    inventoried: set[tuple[str, str]] = set()
    for c in capacity:
        cap_cost[c.bucket] += c.gpu_seconds * rate(c.gpu_product, c.spot)
        cap_seconds[c.bucket] += c.gpu_seconds
        inventoried.add((c.bucket, c.node))

    alloc: dict[tuple[str, tuple[str, ...]], Fraction] = defaultdict(Fraction)
    alloc_gpu_seconds: dict[tuple[str, tuple[str, ...]], Fraction] = defaultdict(Fraction)
    alloc_on_inventory: dict[str, Fraction] = defaultdict(Fraction)
    alloc_seconds_on_inventory: dict[str, Fraction] = defaultdict(Fraction)
    extra_cost: dict[str, Fraction] = defaultdict(Fraction)
    extra_seconds: dict[str, Fraction] = defaultdict(Fraction)
    for u in usage:
        gpu_seconds = u.unit_seconds * share_of(u)
        cost = gpu_seconds * rate(u.gpu_product, u.spot)
        cell = (u.bucket, u.key)
        alloc[cell] += cost
        alloc_gpu_seconds[cell] += gpu_seconds
        if u.node == ON_INVENTORY or (u.bucket, u.node) in inventoried:
            alloc_on_inventory[u.bucket] += cost
            alloc_seconds_on_inventory[u.bucket] += gpu_seconds
        else:
            warnings.add(f"node {u.node} has usage but no capacity record: priced from its usage alone")
            extra_cost[u.bucket] += cost
            extra_seconds[u.bucket] += gpu_seconds

    bucket_labels = sorted(set(cap_cost) | {b for b, _ in alloc})
    idle_exact = {b: cap_cost[b] - alloc_on_inventory[b] for b in bucket_labels}
    idle_seconds = {b: cap_seconds[b] - alloc_seconds_on_inventory[b] for b in bucket_labels}
    for b in bucket_labels:
        if idle_seconds[b] < 0:
            warnings.add(f"{b}: more GPU time allocated than nodes have; idle is negative")
    cells: dict[tuple, Fraction] = {}
    idle_share_exact: dict[tuple[str, tuple[str, ...]], Fraction] = {}
    per_bucket_alloc: dict[str, Fraction] = defaultdict(Fraction)
    for (b, _key), cost in alloc.items():
        per_bucket_alloc[b] += cost
    for (b, key), cost in alloc.items():
        share = Fraction(0)
        if book.idle_cost == "ShareByAllocation" and per_bucket_alloc[b] > 0:
            share = idle_exact[b] * cost / per_bucket_alloc[b]
        idle_share_exact[(b, key)] = share
        cells[("line", b, key)] = cost + share
    for b in bucket_labels:
        shared = book.idle_cost == "ShareByAllocation" and per_bucket_alloc[b] > 0
        if not shared and (idle_exact[b] != 0 or idle_seconds[b] != 0):
            cells[("idle", b)] = idle_exact[b]

    cents = largest_remainder(cells) if cells else {}
    lines = tuple(
        ChargebackLine(
            bucket=b,
            key=key,
            gpu_hours=_hours(alloc_gpu_seconds[(b, key)]),
            cost=cents_to_decimal(cents[("line", b, key)]),
            idle_share=cents_to_decimal(round(idle_share_exact[(b, key)] * 100)),
        )
        for (_kind, b, key) in sorted((c for c in cells if c[0] == "line"), key=lambda c: (c[1], c[2]))
    )
    idle = tuple(
        IdleLine(bucket=c[1], gpu_hours=_hours(idle_seconds[c[1]]), cost=cents_to_decimal(cents[c]))
        for c in sorted((c for c in cells if c[0] == "idle"), key=lambda c: c[1])
    )
    return Chargeback(
        period=period,
        granularity=granularity,
        group_by=group_by,
        currency=book.currency,
        idle_cost=book.idle_cost,
        lines=lines,
        idle=idle,
        cluster_cost=cents_to_decimal(sum(cents.values())),
        cluster_gpu_hours=_hours(
            sum(cap_seconds.values(), Fraction(0)) + sum(extra_seconds.values(), Fraction(0))
        ),
        warnings=tuple(sorted(warnings)),
    )


def _hours(seconds: Fraction) -> Decimal:
    return (Decimal(seconds.numerator) / Decimal(seconds.denominator) / 3600).quantize(Decimal("0.001"))


def chargeback_from_intervals(
    intervals: Iterable[UsageInterval],
    nodes: Iterable[NodeCapacity],
    book: PriceBook,
    period: Period,
    *,
    granularity: str = "total",
    group_by: Sequence[str] = ("team",),
    now: datetime | None = None,
) -> Chargeback:
    """Convenience for in-memory data; `now` closes open intervals (defaults to the period end)."""
    now = now or period.until
    nodes = list(nodes)
    usage = aggregate_usage(intervals, period, granularity, group_by, now, nodes)
    capacity = aggregate_capacity(nodes, period, granularity, now)
    return compute_chargeback(usage, capacity, book, period, granularity, group_by)
