"""The controller's refits: each reads its training data from the stores a FitInput hands it (the edge) and
fits on plain data (the models' modules). Registered in kgwe.optimizer.registry; run by
kgwe.optimizer.service on each model's schedule.

A fit never raises for bad data: absurd rows are dropped and counted in the record's notes, and too little
history gives a record that says so (predictions then fall back, with that reason).
"""

from __future__ import annotations

from datetime import timedelta

from kgwe.optimizer import runtime
from kgwe.optimizer.admission import WORKLOAD_LEVELS, run_keys
from kgwe.optimizer.record import ModelRecord
from kgwe.optimizer.registry import FitInput

RUNTIME_HISTORY = timedelta(days=90)  # finished runs a runtime fit reads: a quarter of the cluster's work
RUNTIME_WARMUP = 20  # runs that only teach before the held-out scoring starts


def fit_runtime(inp: FitInput) -> ModelRecord:
    """The runtime model from the finished GPUWorkload runs of the last RUNTIME_HISTORY, with held-out
    scores from a rolling origin over the same runs (each scored from the runs that ended before it)."""
    since = inp.now - RUNTIME_HISTORY
    runs = inp.models.runs(since, inp.now)
    examples = [runtime.Example(run_keys(r), r.seconds) for r in runs]
    model = runtime.fit(examples, WORKLOAD_LEVELS)
    notes = list(model.notes)
    metrics: dict[str, float] = {}
    timed = [
        runtime.Timed(ex, r.started.timestamp(), r.ended.timestamp())
        for ex, r in zip(examples, runs, strict=True)
    ]
    scores, _ = runtime.rolling_origin(timed, WORKLOAD_LEVELS, warmup=RUNTIME_WARMUP)
    if scores.examples:
        metrics = scores.metrics()
    else:
        notes.append(
            f"{len(runs)} finished run(s): too few to score on held-out runs (the first "
            f"{RUNTIME_WARMUP} only teach)"
        )
    if not runs:
        notes.append("no finished run recorded yet: predictions use the prior from public job runtimes")
    return ModelRecord(
        name=runtime.NAME,
        version=runtime.VERSION,
        fitted_at=inp.now,
        since=min((r.started for r in runs), default=since),
        until=inp.now,
        samples=model.runs,
        metrics=metrics,
        params=model.to_params(),
        notes=tuple(notes),
    )
