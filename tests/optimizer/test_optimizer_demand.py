"""The MIG demand model: the mix and the level from measured demand, bad measurements dropped, no outlook
without enough history, pools sharing a profile splitting it, scores on the day that followed, and a
replay whose forecaster sees only the past."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from kgwe.gpu import catalog
from kgwe.gpu.layouts import fit as fit_layout
from kgwe.optimizer import demand
from kgwe.optimizer.demand import DemandModel, fit, held_out, pool_outlooks, series_from_intervals
from kgwe.planner.model import GPUState, PoolRequest
from kgwe.planner.rebalance import Settings
from kgwe.sim.mig_rebalance import Pod, Rebalancing, simulate

SLICES = {"7g.80gb": 7, "3g.40gb": 3, "1g.10gb": 1}


def test_mix_and_level_from_the_window():
    series = [{"7g.80gb": 2, "1g.10gb": 7}] * 30 + [{"7g.80gb": 4}] * 30
    model = fit(series, SLICES)
    assert model.minutes == 60
    assert model.level == {"1g.10gb": 9, "7g.80gb": 5}  # the peak with a quarter more, rounded up
    # slice-minutes: 7g 2*7*30 + 4*7*30 = 1260; 1g 7*30 = 210
    assert abs(model.mix["7g.80gb"] - 1260 / 1470) < 1e-9 and abs(model.mix["1g.10gb"] - 210 / 1470) < 1e-9
    outlook = model.outlook()
    assert outlook.reason == "from 1.0 h of measured MIG demand" and outlook.level == model.level


def test_no_outlook_without_enough_demand():
    assert fit([{"7g.80gb": 1}] * (demand.MIN_MINUTES - 1), SLICES) is None
    assert fit([{}] * 100, SLICES) is None
    assert fit([{"9g.999gb": 3}] * 100, SLICES) is None  # a profile no model offers is not demand


def test_bad_counts_are_not_measurements():
    series = [{"7g.80gb": -4, "3g.40gb": 10**9, "1g.10gb": 2, "x": True}] * 20  # type: ignore[dict-item]
    assert fit(series, SLICES).level == {"1g.10gb": 3}


@given(
    st.lists(st.dictionaries(st.sampled_from(sorted(SLICES)), st.integers(0, 50), max_size=3), max_size=80)
)
def test_the_mix_is_a_distribution_and_the_level_covers_the_window(series):
    model = fit(series, SLICES)
    if model is None:
        return
    assert abs(sum(model.mix.values()) - 1) < 1e-9
    for sample in series:
        for p, n in sample.items():
            assert n <= model.level.get(p, 0)
    assert held_out(model, series, SLICES).level_coverage == 1.0


def test_series_from_intervals_counts_instances_held_each_minute():
    rows = [
        ("7g.80gb", 1, 0.0, 180.0),  # minutes 0-2
        ("7g.80gb", 2, 60.0, None),  # from minute 1, still held
        ("3g.40gb", 1, 100.0, 50.0),  # ends before it starts: not demand
        ("3g.40gb", 0, 0.0, 100.0),  # no instance
    ]
    series = series_from_intervals(rows, 0.0, 300.0)
    assert series == [{"7g.80gb": 1}, {"7g.80gb": 3}, {"7g.80gb": 3}, {"7g.80gb": 2}, {"7g.80gb": 2}]


def test_pools_offering_the_same_profile_split_it_by_what_they_hold():
    model = DemandModel({"7g.80gb": 10, "1g.10gb": 4}, {"7g.80gb": 0.8, "1g.10gb": 0.2}, 600)
    out = pool_outlooks(
        model,
        [
            ("a", frozenset({"7g.80gb", "1g.10gb"}), {"7g.80gb": 3}),
            ("b", frozenset({"7g.80gb"}), {"7g.80gb": 1}),
            ("c", frozenset({"3g.40gb"}), {}),
        ],
    )
    assert out["a"].level == {"7g.80gb": 8, "1g.10gb": 4} and out["b"].level == {"7g.80gb": 3}
    assert out["c"].level == {} and out["c"].mix == {}


def test_params_round_trip_and_garbage_is_refused():
    model = fit([{"7g.80gb": 2}] * 20, SLICES)
    assert DemandModel.from_params(model.to_params()) == model
    assert DemandModel.from_params({"level": "x"}) is None
    assert DemandModel.from_params({"level": {}, "mix": {"a": "nan"}, "minutes": 1}) == DemandModel({}, {}, 1)


def test_held_out_scores_the_day_that_followed():
    model = fit([{"7g.80gb": 4}] * 30, SLICES)  # level 5, all 7g
    after = [{"7g.80gb": 4}] * 5 + [{"7g.80gb": 8}] * 5 + [{"1g.10gb": 7}] * 10  # 1g: 70 slice-minutes
    scores = held_out(model, after, SLICES)
    assert scores.level_coverage == (5 * 7) / (10 * 7 + 10 * 1)
    came_7g = (5 * 4 * 7 + 5 * 8 * 7) / (5 * 4 * 7 + 5 * 8 * 7 + 70)
    assert abs(scores.mix_distance - (1 - came_7g)) < 1e-9


def test_the_replays_forecaster_sees_only_the_minutes_already_replayed():
    h100 = catalog.model_by_key("H100-80GB")
    layout = fit_layout(h100, ["7g.80gb"])
    gpus = tuple(GPUState("n", i, h100.key, layout) for i in range(2))
    calls: list[int] = []

    def spy(measured):
        calls.append(len(measured))
        return None

    pods = [Pod(m, 5, "7g.80gb") for m in range(0, 60, 3)]
    rule = Rebalancing(Settings(timedelta(minutes=5), timedelta(minutes=15), 2), 3, spy)
    simulate(pods, PoolRequest("p", gpus, shares={"7g.80gb": 1.0}), 60, rule)
    minutes_due = [0, *range(5, 60, 5)]
    assert calls[: len(minutes_due)] == [m + 1 for m in minutes_due][: len(calls)]
    assert all(n <= 60 for n in calls)
