"""Chargeback: price aggregated GPU-seconds and apportion the cluster's GPU cost, exactly.

Input is already aggregated (per bucket, node, resource shape and group key), so the same function
serves in-memory intervals (`aggregate_usage`) and SQL aggregates from the store. Every amount is an exact
Fraction until one rounding at the end (kgwe.cost.allocate.apportion_nested): the total of each value of
the first grouping dimension (a team), and of idle kept apart, is its exact total rounded once to the
cent; below it, the inner groups (a team's namespaces) and the per-bucket cells get their share of those
cents by largest remainder. So a team's line is exact to the cent however many days and namespaces it
spans, each cell is within a cent of its exact cost, and Σ line costs + Σ idle = the cluster cost reported
(the sum of those rounded totals: within half a cent per team of the exact cluster cost).

Cluster GPU cost = node capacity GPU-seconds × price, plus allocations on nodes with no capacity record
(priced as if the node existed only for them, with a warning). Idle = capacity cost − allocation cost,
per bucket; negative idle (more allocated than a node has) is kept and warned about, never hidden.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from kgwe import vocab
from kgwe.cost.allocate import apportion_nested, cents_to_decimal
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


class _Pricer:
    """GPU-second prices and GPU shares from the price book, memoised; what cannot be priced counts at 0
    with a warning (the report says so instead of failing)."""

    def __init__(self, book: PriceBook) -> None:
        self.book = book
        self.warnings: set[str] = set()
        self._rates: dict[tuple[str, bool], Fraction] = {}
        self._shares: dict[tuple[Any, ...], Fraction] = {}

    def rate(self, product: str, spot: bool) -> Fraction:
        """Price of one GPU-second of `product`."""
        if (product, spot) not in self._rates:
            price = self.book.price(product)
            if price is None:
                self.warnings.add(f"no price for GPU product {product!r}: its GPU-hours are counted at 0")
                self._rates[(product, spot)] = Fraction(0)
            else:
                self._rates[(product, spot)] = Fraction(price.per_hour(spot)) / _HOUR
        return self._rates[(product, spot)]

    def share(self, u: UsageAggregate) -> Fraction:
        """How much of one physical GPU one unit of the usage's resource is."""
        shape = (u.gpu_product, u.kind, u.mig_profile, u.gpu_milli)
        if shape not in self._shares:
            try:
                self._shares[shape] = self.book.gpu_share(*shape)
            except KgweError as exc:
                self.warnings.add(f"{exc}: those GPU-hours are counted at 0")
                self._shares[shape] = Fraction(0)
        return self._shares[shape]


Cell = tuple[str, tuple[str, ...]]  # (bucket, group key)


@dataclass
class _Priced:
    """Exact cost and GPU-seconds per bucket: of node capacity, of allocations by group, and of usage on
    nodes without a capacity record (priced from usage alone)."""

    cap_cost: dict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    cap_seconds: dict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    alloc: dict[Cell, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    alloc_gpu_seconds: dict[Cell, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    alloc_on_inventory: dict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    alloc_seconds_on_inventory: dict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    extra_seconds: dict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))

    def buckets(self) -> list[str]:
        return sorted(set(self.cap_cost) | {b for b, _ in self.alloc})

    def idle_cost(self) -> dict[str, Fraction]:
        return {b: self.cap_cost[b] - self.alloc_on_inventory[b] for b in self.buckets()}

    def idle_seconds(self) -> dict[str, Fraction]:
        return {b: self.cap_seconds[b] - self.alloc_seconds_on_inventory[b] for b in self.buckets()}


def _price(
    usage: Iterable[UsageAggregate], capacity: Iterable[CapacityAggregate], pricer: _Pricer
) -> _Priced:
    """Pricing: every capacity and usage aggregate at its exact (Fraction) cost."""
    priced = _Priced()
    inventoried: set[tuple[str, str]] = set()
    for c in capacity:
        priced.cap_cost[c.bucket] += c.gpu_seconds * pricer.rate(c.gpu_product, c.spot)
        priced.cap_seconds[c.bucket] += c.gpu_seconds
        inventoried.add((c.bucket, c.node))
    for u in usage:
        gpu_seconds = u.unit_seconds * pricer.share(u)
        cost = gpu_seconds * pricer.rate(u.gpu_product, u.spot)
        cell = (u.bucket, u.key)
        priced.alloc[cell] += cost
        priced.alloc_gpu_seconds[cell] += gpu_seconds
        if u.node == ON_INVENTORY or (u.bucket, u.node) in inventoried:
            priced.alloc_on_inventory[u.bucket] += cost
            priced.alloc_seconds_on_inventory[u.bucket] += gpu_seconds
        else:
            pricer.warnings.add(
                f"node {u.node} has usage but no capacity record: priced from its usage alone"
            )
            priced.extra_seconds[u.bucket] += gpu_seconds
    return priced


def _share_idle(
    priced: _Priced, idle_cost: str
) -> tuple[dict[tuple[Any, ...], Fraction], dict[Cell, Fraction], list[str]]:
    """Idle sharing: (exact amounts to round — ("line", bucket, key) per group, ("idle", bucket) for idle
    kept on its own line —, each line's exact share of idle, warnings). `ShareByAllocation` spreads a
    bucket's idle over its lines in proportion to their cost; `Separate` keeps it on its own line."""
    idle_exact, idle_seconds = priced.idle_cost(), priced.idle_seconds()
    warnings = [
        f"{b}: more GPU time allocated than nodes have; idle is negative"
        for b in priced.buckets()
        if idle_seconds[b] < 0
    ]
    per_bucket_alloc: dict[str, Fraction] = defaultdict(Fraction)
    for (b, _key), cost in priced.alloc.items():
        per_bucket_alloc[b] += cost
    cells: dict[tuple[Any, ...], Fraction] = {}
    idle_share_exact: dict[Cell, Fraction] = {}
    for (b, key), cost in priced.alloc.items():
        share = Fraction(0)
        if idle_cost == "ShareByAllocation" and per_bucket_alloc[b] > 0:
            share = idle_exact[b] * cost / per_bucket_alloc[b]
        idle_share_exact[(b, key)] = share
        cells[("line", b, key)] = cost + share
    for b in priced.buckets():
        shared = idle_cost == "ShareByAllocation" and per_bucket_alloc[b] > 0
        if not shared and (idle_exact[b] != 0 or idle_seconds[b] != 0):
            cells[("idle", b)] = idle_exact[b]
    return cells, idle_share_exact, warnings


def _round(
    priced: _Priced, cells: dict[tuple[Any, ...], Fraction], idle_share_exact: dict[Cell, Fraction]
) -> tuple[tuple[ChargebackLine, ...], tuple[IdleLine, ...], Decimal]:
    """Rounding, once: each team (first key dimension) and idle rounded, its cells reconciled to it."""
    cents = apportion_nested(cells, _rollups)
    idle_seconds = priced.idle_seconds()
    lines = tuple(
        ChargebackLine(
            bucket=b,
            key=key,
            gpu_hours=_hours(priced.alloc_gpu_seconds[(b, key)]),
            cost=cents_to_decimal(cents[("line", b, key)]),
            idle_share=cents_to_decimal(round(idle_share_exact[(b, key)] * 100)),
        )
        for (_kind, b, key) in sorted((c for c in cells if c[0] == "line"), key=lambda c: (c[1], c[2]))
    )
    idle = tuple(
        IdleLine(bucket=c[1], gpu_hours=_hours(idle_seconds[c[1]]), cost=cents_to_decimal(cents[c]))
        for c in sorted((c for c in cells if c[0] == "idle"), key=lambda c: c[1])
    )
    return lines, idle, cents_to_decimal(sum(cents.values()))


def _rollups(cell: tuple[Any, ...]) -> tuple[Hashable, ...]:
    """The groups a cell's cents roll up to, outermost first: ("line", bucket, key) -> its key's prefixes
    (team, then team and namespace, ...); ("idle", bucket) -> idle."""
    if cell[0] == "idle":
        return (("idle",),)
    key = cell[2]
    return tuple(("line", key[: i + 1]) for i in range(len(key)))


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
    pricer = _Pricer(book)
    priced = _price(usage, capacity, pricer)
    cells, idle_share_exact, idle_warnings = _share_idle(priced, book.idle_cost)
    lines, idle, total = _round(priced, cells, idle_share_exact)
    seconds = sum(priced.cap_seconds.values(), Fraction(0)) + sum(priced.extra_seconds.values(), Fraction(0))
    return Chargeback(
        period=period,
        granularity=granularity,
        group_by=group_by,
        currency=book.currency,
        idle_cost=book.idle_cost,
        lines=lines,
        idle=idle,
        cluster_cost=total,
        cluster_gpu_hours=_hours(seconds),
        warnings=tuple(sorted(pricer.warnings | set(idle_warnings))),
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


def mig_savings(usage: Iterable[UsageAggregate], book: PriceBook) -> Decimal:
    """What the period's MIG usage would have cost more on whole GPUs: each MIG instance-second priced as a
    whole GPU-second of its product, minus its priced share (the chargeback's MIG pricing). Exact to the
    cent; products without a price count 0, as in the chargeback."""
    pricer = _Pricer(book)
    saved = Fraction(0)
    for u in usage:
        if u.kind == "mig":
            saved += u.unit_seconds * (1 - pricer.share(u)) * pricer.rate(u.gpu_product, u.spot)
    return cents_to_decimal(round(saved * 100))


@dataclass
class KeyUsage:
    """One group key's usage (e.g. a pod: team, namespace, pod), exact: priced GPU-seconds, their cost, and
    the GPU-seconds held on on-demand (not spot) nodes per GPU product."""

    gpu_seconds: Fraction = Fraction(0)
    cost: Fraction = Fraction(0)
    on_demand_gpu_seconds: dict[str, Fraction] = field(default_factory=dict)


def usage_by_key(
    usage: Iterable[UsageAggregate], book: PriceBook
) -> tuple[dict[tuple[str, ...], KeyUsage], tuple[str, ...]]:
    """Each group key's priced usage across buckets, by the chargeback's prices and shares (what cannot be
    priced counts 0, with a warning), and those warnings."""
    pricer = _Pricer(book)
    out: dict[tuple[str, ...], KeyUsage] = {}
    for u in usage:
        gpu_seconds = u.unit_seconds * pricer.share(u)
        use = out.setdefault(u.key, KeyUsage())
        use.gpu_seconds += gpu_seconds
        use.cost += gpu_seconds * pricer.rate(u.gpu_product, u.spot)
        if not u.spot:
            use.on_demand_gpu_seconds[u.gpu_product] = (
                use.on_demand_gpu_seconds.get(u.gpu_product, Fraction(0)) + gpu_seconds
            )
    return out, tuple(sorted(pricer.warnings))
