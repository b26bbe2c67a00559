"""Chargeback conservation and pricing rules, property-tested with hypothesis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgwe.cost.allocate import apportion_nested, largest_remainder, round_cents
from kgwe.cost.chargeback import chargeback_from_intervals
from kgwe.cost.pricing import base_product, parse_money, pricebook
from kgwe.cost.usage import NodeCapacity, Period, UsageInterval, to_epoch
from kgwe.errors import KgweError

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
T0 = datetime(2026, 10, 1, tzinfo=UTC)
PERIOD = Period(T0, T0 + timedelta(days=3))
PRICES = [
    {"product": H100, "onDemandPerHour": "4.10", "spotPerHour": "1.60"},
    {"product": A100, "onDemandPerHour": "2.933", "spotPerHour": "1.07"},
]
MIG_PROFILES = {
    H100: ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.20gb"],
    A100: ["1g.10gb", "3g.40gb", "7g.80gb"],
}


def book(**kw):
    return pricebook(PRICES, **kw)


def exact_cluster_cents(nodes, prices) -> int:
    """Independent oracle: capacity seconds × hourly price / 3600, rounded once."""
    total = Fraction(0)
    lo, hi = to_epoch(PERIOD.since), to_epoch(PERIOD.until)
    for n in nodes:
        price = next(p for p in prices if p["product"] == n.gpu_product)
        rate = Fraction(Decimal(price["spotPerHour"] if n.spot else price["onDemandPerHour"]))
        end = to_epoch(n.end) if n.end else hi
        seconds = max(0, min(end, hi) - max(to_epoch(n.start), lo))
        total += seconds * n.gpu_count * rate / 3600
    return round_cents(total)


@st.composite
def clusters(draw):
    nodes, intervals = [], []
    for i in range(draw(st.integers(1, 4))):
        product = draw(st.sampled_from([H100, A100]))
        spot = draw(st.booleans())
        start = T0 + timedelta(seconds=draw(st.integers(-3600, 3600 * 24)))
        end = start + timedelta(seconds=draw(st.integers(1, 3600 * 100)))
        node = NodeCapacity(f"n{i}", product, 8, start, end, spot)
        nodes.append(node)
        for j in range(draw(st.integers(0, 5))):
            kind = draw(st.sampled_from(["whole", "mig", "shared"]))
            s = start + timedelta(seconds=draw(st.integers(0, 3600 * 50)))
            e = min(node.end, s + timedelta(seconds=draw(st.integers(1, 3600 * 50))))
            if e <= s:
                continue
            common = dict(
                pod=f"p{i}-{j}",
                namespace=draw(st.sampled_from(["ml", "web", "ops"])),
                team=draw(st.sampled_from(["red", "blue"])),
                node=node.node,
                gpu_product=product,
                start=s,
                end=e,
                spot=spot,
            )
            if kind == "whole":
                intervals.append(UsageInterval(kind="whole", count=1, **common))
            elif kind == "mig":
                prof = draw(st.sampled_from(MIG_PROFILES[product]))
                intervals.append(UsageInterval(kind="mig", count=1, mig_profile=prof, **common))
            else:
                intervals.append(
                    UsageInterval(kind="shared", count=1, gpu_milli=draw(st.integers(1, 1000)), **common)
                )
    return nodes, intervals


@settings(max_examples=150, deadline=None)
@given(
    clusters(),
    st.sampled_from(["Separate", "ShareByAllocation"]),
    st.sampled_from(["ComputeSlices", "MemorySlices", "Max"]),
    st.sampled_from(["total", "day"]),
    st.sampled_from([("team",), ("namespace",), ("team", "gpu_product")]),
)
def test_conservation_to_the_cent(cluster, idle_cost, mig_pricing, granularity, group_by):
    nodes, intervals = cluster
    cb = chargeback_from_intervals(
        intervals,
        nodes,
        book(idle_cost=idle_cost, mig_pricing=mig_pricing),
        PERIOD,
        granularity=granularity,
        group_by=group_by,
    )
    expected = Decimal(exact_cluster_cents(nodes, PRICES)) / 100
    # each team (first dimension) and idle is rounded once: the cluster total is their sum, within half a
    # cent of exact per group (and a cent for the oracle's own rounding)
    groups = len(cb.totals_by(group_by[0])) + (1 if cb.idle else 0)
    assert abs(cb.cluster_cost - expected) <= Decimal("0.005") * groups + Decimal("0.01")
    assert cb.allocated_cost + cb.idle_cost_total == cb.cluster_cost
    assert sum(cb.totals_by(group_by[0]).values(), Decimal(0)) == cb.allocated_cost
    if idle_cost == "ShareByAllocation":
        assert all(i.bucket not in {ln.bucket for ln in cb.lines} for i in cb.idle)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=3), st.fractions(min_value=-100, max_value=10_000), max_size=30))
def test_largest_remainder_conserves_and_stays_within_a_cent(exact):
    cents = largest_remainder(exact)
    assert sum(cents.values()) == round_cents(sum(exact.values(), Fraction(0)))
    for k, v in exact.items():
        assert abs(Fraction(cents[k]) - v * 100) < 1


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.tuples(st.sampled_from("abc"), st.sampled_from("xyz"), st.integers(0, 30)),
        st.fractions(min_value=0, max_value=500, max_denominator=10**6),
        max_size=60,
    )
)
def test_nested_apportionment_rounds_each_top_group_once(exact):
    """Cells (team, namespace, day): each team's cents are its exact total rounded once; each namespace's
    and each cell's are within a cent of exact; every rollup is the sum of its cells."""
    cents = apportion_nested(exact, lambda cell: (cell[0], cell[:2]))
    for team in "abc":
        mine = {c: v for c, v in exact.items() if c[0] == team}
        assert sum(cents[c] for c in mine) == round_cents(sum(mine.values(), Fraction(0)))
        for ns in "xyz":
            cells = [c for c in mine if c[1] == ns]
            assert abs(sum(cents[c] for c in cells) - sum(mine[c] for c in cells) * 100) < 1
    assert all(abs(cents[c] - v * 100) < 1 for c, v in exact.items())


def test_a_team_total_is_its_exact_total_rounded_once():
    """30 days of 9.3713 (exact 281.139) beside 40 cells of half a cent: rounding every cell against the
    cluster total gave the leftover cents to the half cents and the team 281.10; its line is now its exact
    total rounded once, 281.14, and its days are reconciled to it."""
    exact = {("red", day): Fraction("9.3713") for day in range(30)}
    exact.update({("blue", day): Fraction("0.005") for day in range(40)})
    flat = largest_remainder(exact)  # the old way: every cell against the cluster total
    assert sum(flat[("red", d)] for d in range(30)) == 28110
    cents = apportion_nested(exact, lambda cell: (cell[0],))
    assert sum(cents[("red", d)] for d in range(30)) == 28114
    assert {cents[("red", d)] for d in range(30)} <= {937, 938}
    assert sum(cents[("blue", d)] for d in range(40)) == 20


@settings(max_examples=60, deadline=None)
@given(clusters(), st.sampled_from([("team",), ("team", "namespace")]))
def test_daily_team_totals_equal_the_period_totals(cluster, group_by):
    """With idle kept apart a team's exact cost does not depend on the buckets: its daily lines add up to
    the very cents of its one line over the whole period."""
    nodes, intervals = cluster
    daily = chargeback_from_intervals(
        intervals, nodes, book(idle_cost="Separate"), PERIOD, granularity="day", group_by=group_by
    )
    whole = chargeback_from_intervals(
        intervals, nodes, book(idle_cost="Separate"), PERIOD, granularity="total", group_by=("team",)
    )
    assert daily.totals_by("team") == whole.totals_by("team")


def test_mig_pricing_modes_follow_the_slice_geometry():
    end = T0 + timedelta(hours=7)
    iv = UsageInterval("p", "ml", "red", "n0", H100, "mig", 1, T0, end, mig_profile="3g.40gb")
    node = NodeCapacity("n0", H100, 1, T0, T0 + timedelta(hours=7))
    period = Period(T0, T0 + timedelta(hours=7))
    costs = {}
    for mode in ("ComputeSlices", "MemorySlices", "Max"):
        cb = chargeback_from_intervals([iv], [node], book(mig_pricing=mode), period)
        costs[mode] = cb.lines[0].cost
        assert cb.cluster_cost == Decimal("28.70")
    assert costs["ComputeSlices"] == Decimal("12.30")  # 3/7 of 7 h × 4.10
    assert costs["MemorySlices"] == Decimal("14.35")  # 4/8
    assert costs["Max"] == Decimal("14.35")


def test_spot_shared_and_idle_lines():
    period = Period(T0, T0 + timedelta(hours=10))
    nodes = [NodeCapacity("s0", H100, 2, T0, None, spot=True)]
    ivs = [
        UsageInterval(
            "a", "ml", "red", "s0", H100, "shared", 1, T0, T0 + timedelta(hours=10), gpu_milli=250, spot=True
        ),
        UsageInterval("b", "ml", "blue", "s0", H100, "whole", 1, T0, T0 + timedelta(hours=5), spot=True),
    ]
    sep = chargeback_from_intervals(ivs, nodes, book(), period)
    assert sep.totals_by("team") == {"blue": Decimal("8.00"), "red": Decimal("4.00")}
    assert sep.idle_cost_total == Decimal("20.00")  # 32.00 capacity − 12.00 allocated
    shared = chargeback_from_intervals(ivs, nodes, book(idle_cost="ShareByAllocation"), period)
    assert shared.idle == ()
    assert shared.totals_by("team") == {"blue": Decimal("21.33"), "red": Decimal("10.67")}


def test_unknown_product_and_uninventoried_node_are_warned_not_lost():
    period = Period(T0, T0 + timedelta(hours=1))
    ivs = [
        UsageInterval("a", "ml", "red", "ghost", H100, "whole", 2, T0, None),
        UsageInterval("b", "ml", "red", "x", "NVIDIA-Mystery-GPU", "whole", 1, T0, None),
    ]
    cb = chargeback_from_intervals(ivs, [], book(), period)
    assert cb.cluster_cost == Decimal("8.20")
    assert any("Mystery" in w for w in cb.warnings) and any("ghost" in w for w in cb.warnings)
    assert cb.lines[0].gpu_hours == Decimal("3.000")


def test_bad_prices_and_naive_times_are_clear_errors():
    with pytest.raises(KgweError, match="not a price"):
        parse_money("4,10", "gpus[0].onDemandPerHour")
    with pytest.raises(KgweError, match="non-negative"):
        pricebook([{"product": H100, "onDemandPerHour": "-1"}])
    with pytest.raises(KgweError, match="migPricing"):
        pricebook(PRICES, mig_pricing="Slices")
    with pytest.raises(KgweError, match="timezone-aware"):
        UsageInterval("a", "ml", "red", "n", H100, "whole", 1, datetime(2026, 1, 1))
    assert base_product(H100 + "-MIG-1g.10gb") == H100 and base_product(H100 + "-SHARED") == H100


def test_mig_savings_price_each_instance_second_as_a_whole_gpu_minus_its_share():
    from kgwe.cost.chargeback import UsageAggregate, mig_savings

    h100 = "NVIDIA-H100-80GB-HBM3"
    seven = pricebook([{"product": h100, "onDemandPerHour": "7"}])  # ComputeSlices: 1g.10gb = 1/7 GPU
    one_hour = dict(
        bucket="total", node="n", gpu_product=h100, spot=False, key=("t", "ns"), unit_seconds=3600
    )
    mig = UsageAggregate(kind="mig", mig_profile="1g.10gb", gpu_milli=None, **one_hour)
    whole = UsageAggregate(kind="whole", mig_profile=None, gpu_milli=None, **one_hour)
    assert mig_savings([mig, whole], seven) == Decimal("6.00")  # $7 whole vs $1 for the slice
    assert mig_savings([whole], seven) == Decimal("0.00")
