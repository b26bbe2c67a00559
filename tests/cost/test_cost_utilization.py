"""reclaimable_pods: only held pods measured below the threshold; unknown is never idle."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgwe.cost.utilization import reclaimable_pods

BUSY, IDLE, UNMEASURED = ("ml", "busy"), ("ml", "idle"), ("ml", "new")


def test_only_the_idle_held_pod_is_reclaimable():
    activity = {BUSY: 0.8, IDLE: 0.05, ("other", "not-held"): 0.0}
    assert reclaimable_pods(activity, [BUSY, IDLE, UNMEASURED], 0.1) == {IDLE}


def test_the_threshold_is_strict_and_nan_is_unknown():
    assert reclaimable_pods({IDLE: 0.1}, [IDLE], 0.1) == frozenset()
    assert reclaimable_pods({IDLE: math.nan}, [IDLE], 0.5) == frozenset()
    assert reclaimable_pods({IDLE: 0.0}, [IDLE], 0.0) == frozenset()  # threshold 0: nothing is below it


@pytest.mark.parametrize("threshold", [-0.1, 1.5, math.nan])
def test_a_threshold_outside_0_to_1_is_refused(threshold):
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        reclaimable_pods({}, [IDLE], threshold)


pods = st.tuples(st.sampled_from(["ml", "web"]), st.sampled_from(["a", "b", "c", "d"]))
ratios = st.floats(min_value=0.0, max_value=1.0) | st.just(math.nan)


@given(st.dictionaries(pods, ratios), st.lists(pods), st.floats(min_value=0.0, max_value=1.0))
def test_reclaimable_is_exactly_the_measured_held_pods_below_the_threshold(activity, held, threshold):
    got = reclaimable_pods(activity, iter(held), threshold)  # any iterable, consumed once
    assert got <= set(held)
    assert got <= activity.keys()
    for pod in set(held):
        assert (pod in got) == (pod in activity and activity[pod] < threshold)
    # a higher threshold never reclaims less
    assert got <= reclaimable_pods(activity, held, min(1.0, threshold + 0.1))
