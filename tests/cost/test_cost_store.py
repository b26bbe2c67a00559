"""The store on SQLite and PostgreSQL: idempotent writes, SQL aggregation equal to the pure twin."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from kgwe.cost.chargeback import aggregate_capacity, aggregate_usage, chargeback_from_intervals
from kgwe.cost.pricing import pricebook
from kgwe.cost.store import CostStore
from kgwe.cost.usage import NodeCapacity, Period, UsageInterval
from kgwe.errors import KgweError

H100 = "NVIDIA-H100-80GB-HBM3"
T0 = datetime(2026, 10, 1, tzinfo=UTC)
BOOK = pricebook([{"product": H100, "onDemandPerHour": "4.10", "spotPerHour": "1.60"}])


def iv(pod, start_h, end_h=None, **kw):
    base = dict(
        pod=pod,
        namespace="ml",
        team="red",
        node="n0",
        gpu_product=H100,
        kind="whole",
        count=1,
        start=T0 + timedelta(hours=start_h),
        end=None if end_h is None else T0 + timedelta(hours=end_h),
        pod_uid=f"uid-{pod}",
    )
    base.update(kw)
    return UsageInterval(**base)


def test_starting_an_open_interval_twice_is_a_no_op(store):
    assert store.start_usage(iv("a", 0)) is True
    assert store.start_usage(iv("a", 1)) is False
    assert len(store.open_usage()) == 1
    assert store.end_usage("uid-a", T0 + timedelta(hours=2)) == 1
    assert store.end_usage("uid-a", T0 + timedelta(hours=3)) == 0
    assert store.open_usage() == []
    assert store.start_usage(iv("a", 4)) is True  # a new holding after the old one ended


def test_times_round_trip_as_aware_utc(store):
    store.start_usage(iv("a", 0, 5))
    [back] = store.usage(Period(T0, T0 + timedelta(days=1)))
    assert back.start == T0 and back.start.tzinfo is not None and back.end == T0 + timedelta(hours=5)


def test_node_capacity_changes_close_the_old_record(store):
    assert store.set_node(NodeCapacity("n0", H100, 8, T0))
    assert not store.set_node(NodeCapacity("n0", H100, 8, T0 + timedelta(hours=1)))
    assert store.set_node(NodeCapacity("n0", H100, 4, T0 + timedelta(hours=2)))
    nodes = sorted(store.nodes(Period(T0, T0 + timedelta(days=1))), key=lambda n: n.start)
    assert [(n.gpu_count, n.end) for n in nodes] == [(8, T0 + timedelta(hours=2)), (4, None)]


@pytest.mark.parametrize(
    ("granularity", "group_by"),
    [
        ("total", ("team", "namespace")),
        ("day", ("team", "namespace")),
        # team and/or namespace group in SQL by both (the covering index) and roll up in Python
        ("total", ("team",)),
        ("month", ("namespace", "team")),
        # other dimensions group in SQL as asked (SQLite: upsert into a keyed temp table, NULL keys apart)
        ("total", ("pod",)),
        ("month", ("node", "team")),
        ("day", ("gpu_product",)),
    ],
)
def test_sql_aggregation_matches_the_pure_twin(store, granularity, group_by):
    rng = random.Random(7)
    intervals = []
    for i in range(300):
        start = rng.uniform(-24, 24 * 4)
        end = None if rng.random() < 0.1 else start + rng.uniform(0.01, 40)
        kind = rng.choice(["whole", "mig", "shared"])
        extra = {
            "mig": {"mig_profile": rng.choice(["1g.10gb", "3g.40gb"])},
            "shared": {"gpu_milli": rng.choice([100, 250, 500])},
            "whole": {},
        }[kind]
        intervals.append(
            iv(
                f"p{i}",
                start,
                end,
                kind=kind,
                count=rng.randint(1, 3),
                team=rng.choice(["red", "blue"]),
                namespace=rng.choice(["a", "b", "c"]),
                node=f"n{i % 4}",
                spot=(i % 4 == 2),
                **extra,
            )
        )  # n3: no capacity
    nodes = [NodeCapacity(f"n{k}", H100, 8, T0 - timedelta(days=2), None, spot=(k == 2)) for k in range(3)]
    store.add_usage(intervals)
    for n in nodes:
        store.set_node(n)
    period = Period(T0, T0 + timedelta(days=3))
    now = T0 + timedelta(days=2, hours=5)
    assert sorted(store.usage_aggregates(period, granularity, group_by, now), key=repr) == sorted(
        aggregate_usage(intervals, period, granularity, group_by, now, nodes), key=repr
    )
    assert sorted(store.capacity_aggregates(period, granularity, now), key=repr) == sorted(
        aggregate_capacity(nodes, period, granularity, now), key=repr
    )
    from_sql = store.chargeback(BOOK, period, now=now, granularity=granularity, group_by=group_by)
    pure = chargeback_from_intervals(
        intervals, nodes, BOOK, period, granularity=granularity, group_by=group_by, now=now
    )
    assert from_sql == pure
    assert from_sql.allocated_cost + from_sql.idle_cost_total == from_sql.cluster_cost > 0


def test_migrations_are_repeatable(store):
    store.migrate()
    store.start_usage(iv("a", 0, 1))
    store.migrate()
    assert len(store.usage(Period(T0, T0 + timedelta(days=1)))) == 1


def test_unreachable_database_is_a_clear_error(tmp_path):
    down = CostStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout_s=1)
    with pytest.raises(KgweError, match="unavailable"):
        down.migrate()
    with pytest.raises(KgweError, match=r"not a database URL|cannot use"):
        CostStore("nonsense+driver://x")
