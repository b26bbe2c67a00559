"""The budget's queue replay: waits by hand on small cases, and what ordering can and cannot change."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kgwe.optimizer.queue import Job, by_actual, by_prediction, fcfs, mean_wait


def test_shortest_first_waits_less_than_first_come_on_one_gpu():
    jobs = [Job(0, 1, 100, 100), Job(1, 1, 50, 50), Job(2, 1, 10, 10)]
    # FCFS: 0 waits 0, the 50 waits 99, the 10 waits 148
    assert mean_wait(jobs, 1, fcfs) == (0 + 99 + 148) / 3
    # shortest first after the first: the 10 starts at 100 (waits 98), the 50 at 110 (waits 109)
    assert mean_wait(jobs, 1, by_prediction) == (0 + 98 + 109) / 3


def test_the_queue_never_skips_a_large_job_at_its_head():
    jobs = [Job(0, 2, 10, 10), Job(1, 2, 10, 10), Job(2, 1, 1, 1)]
    # capacity 2: the second big job waits for the first; the small one behind it waits too (no backfill)
    assert mean_wait(jobs, 2, fcfs) == (0 + 9 + 18) / 3


def test_a_job_larger_than_the_budget_runs_alone_when_its_turn_comes():
    assert mean_wait([Job(0, 8, 5, 5), Job(1, 1, 1, 1)], 2, fcfs) == (0 + 4) / 2


jobs_st = st.lists(
    st.builds(Job, st.floats(0, 100), st.sampled_from([0.5, 1.0, 2.0]), st.floats(0, 50), st.floats(0, 50)),
    max_size=25,
)


@given(jobs_st)
def test_with_room_for_everyone_nobody_waits(jobs):
    assert mean_wait(jobs, 1000, fcfs) == 0 == mean_wait(jobs, 1000, by_actual)


@given(jobs_st)
def test_waits_are_never_negative_and_every_job_is_counted(jobs):
    for order in (fcfs, by_prediction, by_actual):
        assert mean_wait(jobs, 2, order) >= 0
