"""The cost store: usage intervals and node capacity in SQL (SQLite file by default, PostgreSQL by URL).

Aggregation happens in SQL (integer overlap arithmetic, GROUP BY), so a month of a million intervals
comes back as a few thousand rows for the pure chargeback code. Writes are idempotent: starting an
interval that is already open is a no-op (unique partial index), ending one that is not open is too.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError
from sqlmodel import Session, col, create_engine, select

from kgwe.cost.chargeback import (
    ON_INVENTORY,
    CapacityAggregate,
    Chargeback,
    UsageAggregate,
    UsageShape,
    aggregate_capacity,
    aggregate_usage,
    check_group_by,
    compute_chargeback,
)
from kgwe.cost.pricing import PriceBook
from kgwe.cost.tables import USAGE_GROUP_INDEX_DIMENSIONS, NodeRecord, UsageRecord, resource_key
from kgwe.cost.usage import NodeCapacity, Period, UsageInterval, buckets, from_epoch, to_epoch
from kgwe.errors import KgweError

DEFAULT_SQLITE = "kgwe-cost.db"
_AGGREGATE_WORK_MEM = "64MB"  # PostgreSQL memory for chargeback's hashed GROUP BY (see _sum_by)
_ANALYZE_AFTER_ROWS = 10_000  # a bulk insert at least this large refreshes PostgreSQL's planner statistics
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def normalize_url(url: str | None) -> str:
    """A plain path or None means a SQLite file; postgres URLs get the psycopg 3 driver."""
    if not url:
        url = DEFAULT_SQLITE
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _safe(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<invalid URL>"


class CostStore:
    def __init__(self, url: str | None = None, *, connect_timeout_s: int = 5) -> None:
        self.url = normalize_url(url)
        try:
            parsed = make_url(self.url)
        except ArgumentError:
            raise KgweError(f"not a database URL: {url!r}") from None
        args = {"connect_timeout": connect_timeout_s} if parsed.get_backend_name() == "postgresql" else {}
        try:
            self.engine: Engine = create_engine(self.url, connect_args=args)
        except (ArgumentError, ModuleNotFoundError) as exc:
            raise KgweError(f"cannot use database {_safe(self.url)}: {exc}") from None
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        try:
            with Session(self.engine) as session:
                yield session
        except OperationalError as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise KgweError(f"cost database {_safe(self.url)} is unavailable: {reason}") from None

    def migrate(self) -> None:
        """Bring the schema to the newest alembic revision (safe to run on every start)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        try:
            with self.engine.begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
        except OperationalError as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise KgweError(f"cost database {_safe(self.url)} is unavailable: {reason}") from None

    def close(self) -> None:
        self.engine.dispose()

    # -- usage -----------------------------------------------------------------------------------
    @staticmethod
    def _row(iv: UsageInterval) -> dict[str, Any]:
        return {
            "pod_uid": iv.pod_uid or f"{iv.namespace}/{iv.pod}",
            "pod": iv.pod,
            "namespace": iv.namespace,
            "team": iv.team,
            "node": iv.node,
            "gpu_product": iv.gpu_product,
            "kind": iv.kind,
            "resource": resource_key(iv.kind, iv.mig_profile, iv.gpu_milli),
            "mig_profile": iv.mig_profile,
            "gpu_milli": iv.gpu_milli,
            "count": iv.count,
            "spot": iv.spot,
            "start_s": to_epoch(iv.start),
            "end_s": None if iv.end is None else to_epoch(iv.end),
        }

    def _record(self, iv: UsageInterval) -> UsageRecord:
        return UsageRecord(**self._row(iv))

    def start_usage(self, iv: UsageInterval) -> bool:
        """Record an open (or closed) interval; False if that holding is already open (no double count)."""
        with self.session() as s:
            s.add(self._record(iv))
            return _commit_unless_duplicate(s)

    def end_usage(self, pod_uid: str, end: datetime, resource: str | None = None) -> int:
        """Close the pod's open intervals at `end` (never before their start); returns how many."""
        end_s = to_epoch(end)
        with self.session() as s:
            query = select(UsageRecord).where(
                UsageRecord.pod_uid == pod_uid, col(UsageRecord.end_s).is_(None)
            )
            if resource is not None:
                query = query.where(UsageRecord.resource == resource)
            rows = s.exec(query).all()
            return _close(s, rows, end_s)

    def recorded_pods(self, pod_uids: Iterable[str], chunk: int = 500) -> set[str]:
        """Those of `pod_uids` with any usage interval, open or closed (a finished pod seen before)."""
        uids, found = sorted(set(pod_uids)), set[str]()
        with self.session() as s:
            for i in range(0, len(uids), chunk):
                query = select(UsageRecord.pod_uid).where(col(UsageRecord.pod_uid).in_(uids[i : i + chunk]))
                found.update(s.exec(query.distinct()).all())
        return found

    def open_usage(self) -> list[UsageInterval]:
        with self.session() as s:
            return [
                r.to_interval() for r in s.exec(select(UsageRecord).where(col(UsageRecord.end_s).is_(None)))
            ]

    def add_usage(self, intervals: Iterable[UsageInterval], batch: int = 50_000) -> int:
        """Bulk insert (imports, benchmarks) on the raw driver: COPY on PostgreSQL, executemany on
        SQLite; ORM objects are far too slow for millions of rows. One transaction: all or nothing."""
        total = 0
        columns = list(_USAGE_COLUMNS)
        try:
            with self.engine.begin() as conn:
                dbapi = conn.connection.dbapi_connection
                assert dbapi is not None  # a connection checked out of the pool has its driver's
                cursor = dbapi.cursor()
                chunk: list[tuple[Any, ...]] = []
                for iv in intervals:
                    row = self._row(iv)
                    chunk.append(tuple(row[c] for c in columns))
                    if len(chunk) >= batch:
                        total += self._bulk(cursor, columns, chunk)
                        chunk = []
                if chunk:
                    total += self._bulk(cursor, columns, chunk)
                if self.dialect == "postgresql" and total >= _ANALYZE_AFTER_ROWS:
                    # fresh statistics: with the stale ones of an empty table the planner sorts a million
                    # rows to disk for chargeback's GROUP BY instead of hashing them (9x slower)
                    cursor.execute("ANALYZE kgwe_usage")
        except OperationalError as exc:
            raise KgweError(f"cost database {_safe(self.url)} is unavailable: {exc.orig}") from None
        return total

    def _bulk(self, cursor: Any, columns: list[str], rows: list[tuple[Any, ...]]) -> int:
        names = ", ".join(columns)
        if self.dialect == "postgresql":
            with cursor.copy(f"COPY kgwe_usage ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join("?" for _ in columns)
            cursor.executemany(f"INSERT INTO kgwe_usage ({names}) VALUES ({marks})", rows)
        return len(rows)

    def _overlapping(self, table: type[UsageRecord] | type[NodeRecord], period: Period) -> list[Any]:
        lo, hi = to_epoch(period.since), to_epoch(period.until)
        with self.session() as s:
            overlaps = (col(table.start_s) < hi) & (col(table.end_s).is_(None) | (col(table.end_s) > lo))
            return list(s.exec(select(table).where(overlaps)))

    def usage(self, period: Period) -> list[UsageInterval]:
        """Intervals overlapping the period, open or closed."""
        return [r.to_interval() for r in self._overlapping(UsageRecord, period)]

    # -- nodes -----------------------------------------------------------------------------------
    def set_node(self, cap: NodeCapacity) -> bool:
        """Open capacity for a node; if it changed (product, count, spot), close the old record first."""
        start_s = to_epoch(cap.start)
        with self.session() as s:
            query = select(NodeRecord).where(NodeRecord.node == cap.node, col(NodeRecord.end_s).is_(None))
            current = s.exec(query).first()
            if current and (current.gpu_product, current.gpu_count, current.spot) == (
                cap.gpu_product,
                cap.gpu_count,
                cap.spot,
            ):
                return False
            if current:
                current.end_s = max(start_s, current.start_s)
                s.add(current)
                s.flush()
            s.add(
                NodeRecord(
                    node=cap.node,
                    gpu_product=cap.gpu_product,
                    gpu_count=cap.gpu_count,
                    spot=cap.spot,
                    start_s=start_s,
                    end_s=None if cap.end is None else to_epoch(cap.end),
                )
            )
            return _commit_unless_duplicate(s)

    def end_node(self, node: str, end: datetime) -> int:
        end_s = to_epoch(end)
        with self.session() as s:
            rows = s.exec(
                select(NodeRecord).where(NodeRecord.node == node, col(NodeRecord.end_s).is_(None))
            ).all()
            return _close(s, rows, end_s)

    def nodes(self, period: Period) -> list[NodeCapacity]:
        return [r.to_capacity() for r in self._overlapping(NodeRecord, period)]

    # -- aggregation in SQL ------------------------------------------------------------------------
    def usage_aggregates(
        self, period: Period, granularity: str, group_by: Sequence[str], now: datetime
    ) -> list[UsageAggregate]:
        """Usage on nodes with capacity in the bucket is pooled (node ON_INVENTORY): grouping a million
        rows by node as well would return nearly a million groups. Nodes without capacity (rare) are
        found through the node index first and aggregated per node in a second, indexed query."""
        dims = check_group_by(group_by)
        if granularity == "day":
            return self._daily_usage_aggregates(period, dims, now)
        # by team and/or namespace, the groups stream from an index in SQL; rolled up to `dims` here
        indexed = set(dims) <= set(USAGE_GROUP_INDEX_DIMENSIONS)
        sql_dims = list(USAGE_GROUP_INDEX_DIMENSIONS) if indexed else list(dims)
        shape = ["gpu_product", "spot", "kind", "mig_profile", "gpu_milli", *sql_dims]
        picks = [sql_dims.index(d) for d in dims]
        end, start = self._least("COALESCE(end_s, :now)", ":hi"), self._greatest("start_s", ":lo")
        seconds = f"({end} - {start}) * count"
        overlap = "start_s < :hi AND COALESCE(end_s, :now) > :lo AND start_s < COALESCE(end_s, :now)"
        capacity = text("""SELECT DISTINCT node FROM kgwe_node_capacity WHERE gpu_count > 0 AND start_s < :hi
                           AND COALESCE(end_s, :now) > :lo AND start_s < COALESCE(end_s, :now)""")
        now_s = to_epoch(now)
        sums: dict[UsageShape, int] = defaultdict(int)
        with self.session() as s:
            used_nodes = {n for (n,) in _rows(s.execute(text("SELECT DISTINCT node FROM kgwe_usage")))}
            for label, lo, hi in buckets(period, granularity, now):
                params: dict[str, object] = {"lo": lo, "hi": hi, "now": now_s}
                uncovered = sorted(used_nodes - {n for (n,) in _rows(s.execute(capacity, params))})
                groups = [(True, shape, overlap)]  # (pooled under ON_INVENTORY, grouped columns, condition)
                if uncovered:
                    params["uncovered"] = uncovered
                    groups = [
                        (True, shape, f"{overlap} AND node NOT IN :uncovered"),
                        (False, ["node", *shape], f"{overlap} AND node IN :uncovered"),
                    ]
                for pooled, keys, where in groups:
                    for row in self._sum_by(s, keys, seconds, where, params, indexed=indexed and pooled):
                        node, product, spot, kind, profile, milli, *key, total = (
                            (ON_INVENTORY, *row) if pooled else row
                        )
                        if total and int(total) > 0:
                            group = tuple(str(key[k]) for k in picks)
                            shape_key = (label, node, product, bool(spot), kind, profile, milli, group)
                            sums[shape_key] += int(total)
        return [UsageAggregate(*shape_, unit_seconds=total) for shape_, total in sums.items()]

    def _sum_by(
        self,
        s: Session,
        keys: Sequence[str],
        weight: str,
        where: str,
        params: dict[str, Any],
        *,
        indexed: bool = False,
    ) -> list[tuple[Any, ...]]:
        """Rows of (*keys, Σ weight) over kgwe_usage WHERE `where`, grouped by `keys` (expressions).

        PostgreSQL hash-aggregates a GROUP BY; SQLite streams it from the covering index when `indexed`
        (the keys are that index's grouping columns). Otherwise SQLite would sort every matching row;
        upserting into a small keyed temp table (a few thousand groups) does the same sum in about two
        thirds of the time on a million rows, scanning the table (walking the start_s index row by row for
        a month-wide range is 2x slower). NULL keys are kept apart from any value by a flag column beside
        each key.
        """
        expanding: list[Any] = [
            bindparam(name, expanding=True) for name in params if isinstance(params[name], list)
        ]
        if self.dialect == "postgresql":
            # The planner cannot estimate the overlap condition and guesses tens of thousands of groups
            # (there are thousands): over the 4 MB default it sorts a million rows to disk instead of
            # hashing them (3.8 s vs well under 1 s). Room for the hash, for this transaction only.
            s.execute(text(f"SET LOCAL work_mem = '{_AGGREGATE_WORK_MEM}'"))
        if self.dialect != "sqlite" or indexed:
            listed = ", ".join(keys)
            query = text(f"SELECT {listed}, SUM({weight}) FROM kgwe_usage WHERE {where} GROUP BY {listed}")
            return [tuple(row) for row in s.execute(query.bindparams(*expanding), params)]
        names = [f"k{i}" for i in range(len(keys))] + [f"z{i}" for i in range(len(keys))]
        values = [f"COALESCE({k}, 0)" for k in keys] + [f"{k} IS NULL" for k in keys]
        s.execute(text("DROP TABLE IF EXISTS temp.kgwe_sum_by"))
        s.execute(
            text(
                f"CREATE TEMP TABLE kgwe_sum_by ({', '.join(names)}, total INTEGER NOT NULL, "
                f"PRIMARY KEY ({', '.join(names)})) WITHOUT ROWID"
            )
        )
        insert = text(
            f"INSERT INTO temp.kgwe_sum_by SELECT {', '.join(values)}, {weight} FROM kgwe_usage NOT INDEXED "
            f"WHERE {where} ON CONFLICT DO UPDATE SET total = total + excluded.total"
        )
        s.execute(insert.bindparams(*expanding), params)
        unflagged = ", ".join(f"CASE WHEN z{i} THEN NULL ELSE k{i} END" for i in range(len(keys)))
        rows = [tuple(row) for row in s.execute(text(f"SELECT {unflagged}, total FROM temp.kgwe_sum_by"))]
        s.execute(text("DROP TABLE temp.kgwe_sum_by"))
        return rows

    def _daily_usage_aggregates(
        self, period: Period, dims: tuple[str, ...], now: datetime
    ) -> list[UsageAggregate]:
        """Day buckets in one pass instead of one scan per day: intervals inside a single day (most of
        them) are summed in SQL grouped by day number; the rest (spanning midnight, or on a node that
        lacks capacity on some day) come back raw and go through the pure twin, `aggregate_usage`."""
        cuts = buckets(period, "day", now)
        if not cuts:
            return []
        caps = self.nodes(period)
        covered_days: dict[str, int] = defaultdict(int)
        for c in aggregate_capacity(caps, period, "day", now):
            covered_days[c.node] += 1
        full = {n for n, days in covered_days.items() if days == len(cuts)}
        origin = datetime(period.since.year, period.since.month, period.since.day, tzinfo=UTC)
        lo, hi, now_s, origin_s = cuts[0][1], cuts[-1][2], to_epoch(now), to_epoch(origin)
        labels = {(lo_ - origin_s) // 86400: label for label, lo_, _ in cuts}
        cols = ", ".join(dims)
        shape = f"gpu_product, spot, kind, mig_profile, gpu_milli, {cols}"
        end = self._least("COALESCE(end_s, :now)", ":hi")
        single = f"(start_s >= :lo AND (start_s - :origin) / 86400 = ({end} - 1 - :origin) / 86400)"
        params: dict[str, Any] = {"lo": lo, "hi": hi, "now": now_s, "origin": origin_s}
        with self.session() as s:
            used = {n for (n,) in _rows(s.execute(text("SELECT DISTINCT node FROM kgwe_usage")))}
            partial = sorted(used - full)
            on_full = " AND node NOT IN :partial" if partial else ""
            pooled = text(f"""
                SELECT (start_s - :origin) / 86400 AS day_index, {shape}, SUM(({end} - start_s) * count)
                FROM kgwe_usage WHERE start_s < :hi AND {end} > start_s AND {single}{on_full}
                GROUP BY day_index, {shape}""")
            rest = text(f"""
                SELECT pod, namespace, team, node, gpu_product, kind, count, start_s, end_s, mig_profile,
                       gpu_milli, spot, pod_uid
                FROM kgwe_usage
                WHERE (end_s > :lo OR end_s IS NULL) AND start_s < :hi AND start_s < COALESCE(end_s, :now)
                  AND NOT ({single}{on_full})""")
            if partial:
                params["partial"] = partial
                pooled = pooled.bindparams(bindparam("partial", expanding=True))
                rest = rest.bindparams(bindparam("partial", expanding=True))
            sums: dict[UsageShape, int] = defaultdict(int)
            for day, product, spot, kind, profile, milli, *key, total in _rows(s.execute(pooled, params)):
                if total and int(total) > 0:
                    shape_key = (
                        labels[int(day)],
                        ON_INVENTORY,
                        product,
                        bool(spot),
                        kind,
                        profile,
                        milli,
                        tuple(str(k) for k in key),
                    )
                    sums[shape_key] += int(total)
            leftovers = [_interval(row) for row in s.execute(rest, params)]
        for agg in aggregate_usage(leftovers, period, "day", dims, now, caps):
            sums[
                (
                    agg.bucket,
                    agg.node,
                    agg.gpu_product,
                    agg.spot,
                    agg.kind,
                    agg.mig_profile,
                    agg.gpu_milli,
                    agg.key,
                )
            ] += agg.unit_seconds
        return [UsageAggregate(*k, unit_seconds=v) for k, v in sums.items()]

    def _overlap_sum(self, weight: str) -> str:
        """Σ seconds of [start, end or now) inside [lo, hi), times `weight`, in integer SQL."""
        end, start = self._least("COALESCE(end_s, :now)", ":hi"), self._greatest("start_s", ":lo")
        return f"SUM(({end} - {start}) * {weight})"

    def _least(self, a: str, b: str) -> str:
        return f"min({a}, {b})" if self.dialect == "sqlite" else f"LEAST({a}, {b})"

    def _greatest(self, a: str, b: str) -> str:
        return f"max({a}, {b})" if self.dialect == "sqlite" else f"GREATEST({a}, {b})"

    def capacity_aggregates(self, period: Period, granularity: str, now: datetime) -> list[CapacityAggregate]:
        sql = text(f"""
            SELECT node, gpu_product, spot, {self._overlap_sum("gpu_count")}
            FROM kgwe_node_capacity
            WHERE start_s < :hi AND COALESCE(end_s, :now) > :lo AND start_s < COALESCE(end_s, :now)
            GROUP BY node, gpu_product, spot
        """)
        now_s = to_epoch(now)
        out: list[CapacityAggregate] = []
        with self.session() as s:
            for label, lo, hi in buckets(period, granularity, now):
                for node, product, spot, seconds in _rows(s.execute(sql, {"lo": lo, "hi": hi, "now": now_s})):
                    if seconds and int(seconds) > 0:
                        out.append(CapacityAggregate(label, node, product, bool(spot), int(seconds)))
        return out

    def chargeback(
        self,
        book: PriceBook,
        period: Period,
        *,
        now: datetime,
        granularity: str = "total",
        group_by: Sequence[str] = ("team",),
    ) -> Chargeback:
        """Open intervals are charged up to `now` (the caller's clock), never past the period end."""
        usage = self.usage_aggregates(period, granularity, group_by, now)
        capacity = self.capacity_aggregates(period, granularity, now)
        return compute_chargeback(usage, capacity, book, period, granularity, group_by)


_USAGE_COLUMNS = (
    "pod_uid",
    "pod",
    "namespace",
    "team",
    "node",
    "gpu_product",
    "kind",
    "resource",
    "mig_profile",
    "gpu_milli",
    "count",
    "spot",
    "start_s",
    "end_s",
)


def _interval(row: Sequence[Any]) -> UsageInterval:
    pod, ns, team, node, product, kind, count, start, stop, profile, milli, spot, uid = row
    end = None if stop is None else from_epoch(stop)
    return UsageInterval(
        pod, ns, team, node, product, kind, count, from_epoch(start), end, profile, milli, bool(spot), uid
    )


def _commit_unless_duplicate(s: Session) -> bool:
    """Commit; a unique-index conflict (the holding is already open) is a no-op, not an error."""
    try:
        s.commit()
    except IntegrityError:
        s.rollback()
        return False
    return True


def _close(s: Session, rows: Sequence[UsageRecord | NodeRecord], end_s: int) -> int:
    for row in rows:
        row.end_s = max(end_s, row.start_s)
        s.add(row)
    s.commit()
    return len(rows)


def _rows(result: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of a textual query as plain tuples: SQL gives their columns no Python types."""
    return (tuple(row) for row in result)


def _sqlite_pragmas(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()
