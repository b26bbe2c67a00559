"""The history the optimizer learns from, as plain data: finished GPUWorkload runs.

A run is what one GPUWorkload did from its (last) run's start to its end: which runtime and workload type it
used, how many pods, how many GPUs they held, and the outcome. The workload controller records one when a
workload completes or fails (kgwe.optimizer.service); nothing here reads a cluster or a database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

MAX_RUN_SECONDS = 366 * 86400  # a run said to last longer than a year is an absurd record, not a run


@dataclass(frozen=True)
class FinishedRun:
    """One finished run. `shape` is the GPU request of one pod as `whole:2`, `mig:3g.40gb`, `shared:500`;
    `gpu_milli` the GPUs all its pods held, in thousandths of a GPU."""

    uid: str
    namespace: str
    workload: str
    runtime: str
    workload_type: str
    shape: str
    pods: int
    gpu_milli: int
    started: datetime
    ended: datetime
    outcome: str  # Complete | Failed

    @property
    def seconds(self) -> float:
        return (self.ended - self.started).total_seconds()

    def problem(self) -> str | None:
        """Why this run cannot be learned from (None: it can): negative or absurd durations, no pods."""
        if self.started.tzinfo is None or self.ended.tzinfo is None:
            return "times without a time zone"
        if self.seconds < 0:
            return f"ends {-self.seconds:.0f} s before it starts"
        if self.seconds > MAX_RUN_SECONDS:
            return f"lasts {self.seconds / 86400:.0f} days (over {MAX_RUN_SECONDS // 86400})"
        if self.pods <= 0:
            return "no pods"
        return None
