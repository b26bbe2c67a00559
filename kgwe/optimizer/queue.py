"""A queue of GPU jobs behind a budget, replayed (pure): which order serves the waiting jobs sooner.

A budget that holds a workload until money remains (kgwe.optimizer.admission) turns a team's GPUs into a
queue. When capacity frees, the queued jobs start in the queue's order as long as the first one fits
(no skipping ahead: a large job is never starved by small ones behind it). First come, first served orders
by arrival; ordering by the predicted duration (shortest first) is the rule the PAI simulator's
"shortest job first with the duration estimated from history" follows. Reported: the mean wait.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    arrival: float  # seconds
    gpus: float  # GPUs it holds while it runs (a share of one counts as that share)
    seconds: float  # how long it really runs
    predicted: float  # what the queue's order knows of it


Order = Callable[[Job], float]


def fcfs(job: Job) -> float:
    return job.arrival


def by_prediction(job: Job) -> float:
    return job.predicted


def by_actual(job: Job) -> float:
    """The oracle: the true duration (an upper bound on what any prediction could buy)."""
    return job.seconds


def mean_wait(jobs: Sequence[Job], capacity: float, order: Order) -> float:
    """Replay `jobs` on `capacity` GPUs, starting queued jobs in `order` (ties by arrival) while the first
    fits; the mean seconds from arrival to start. A job larger than the capacity runs alone when the
    queue reaches it (it would never fit otherwise)."""
    if not jobs:
        return 0.0
    arrivals = sorted(range(len(jobs)), key=lambda i: jobs[i].arrival)
    queue: list[tuple[float, float, int]] = []
    running: list[tuple[float, int]] = []
    free = capacity
    waited = 0.0
    a = 0
    while a < len(arrivals) or queue:
        next_arrival = jobs[arrivals[a]].arrival if a < len(arrivals) else math.inf
        next_end = running[0][0] if running else math.inf
        now = min(next_arrival, next_end)
        while running and running[0][0] <= now:
            _, i = heapq.heappop(running)
            free += jobs[i].gpus
        while a < len(arrivals) and jobs[arrivals[a]].arrival <= now:
            i = arrivals[a]
            heapq.heappush(queue, (order(jobs[i]), jobs[i].arrival, i))
            a += 1
        while queue:
            _, _, i = queue[0]
            fits = jobs[i].gpus <= free + 1e-9 or (not running and free >= capacity - 1e-9)
            if not fits:
                break
            heapq.heappop(queue)
            free -= jobs[i].gpus
            waited += now - jobs[i].arrival
            heapq.heappush(running, (now + max(0.0, jobs[i].seconds), i))
    return waited / len(jobs)
