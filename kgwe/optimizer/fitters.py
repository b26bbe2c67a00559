"""The controller's refits: each reads its training data from the stores a FitInput hands it (the edge) and
fits on plain data (the models' modules). Registered in kgwe.optimizer.registry; run by
kgwe.optimizer.service on each model's schedule.

A fit never raises for bad data: absurd rows are dropped and counted in the record's notes, and too little
history gives a record that says so (predictions then fall back, with that reason).
"""

from __future__ import annotations

from datetime import timedelta

import orjson

from kgwe.optimizer import demand, runtime
from kgwe.optimizer.admission import WORKLOAD_LEVELS, run_keys
from kgwe.optimizer.record import MAX_RECORD_BYTES, ModelRecord
from kgwe.optimizer.registry import FitInput

RUNTIME_HISTORY = timedelta(days=90)  # finished runs a runtime fit reads: a quarter of the cluster's work
RUNTIME_WARMUP = 20  # runs that only teach before the held-out scoring starts


def fit_runtime(inp: FitInput) -> ModelRecord:
    """The runtime model from the finished GPUWorkload runs of the last RUNTIME_HISTORY, with held-out
    scores from a rolling origin over the same runs (each scored from the runs that ended before it)."""
    since = inp.now - RUNTIME_HISTORY
    runs = inp.models.runs(since, inp.now)
    examples = [runtime.Example(run_keys(r), r.seconds) for r in runs]
    model, kept = _within_bound(examples)
    notes = list(model.notes)
    if kept < runtime.MAX_GROUPS:
        notes.append(f"kept the {kept:,} most populous groups per level: more would pass the record's bound")
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


def _within_bound(examples: list[runtime.Example]) -> tuple[runtime.RuntimeModel, int]:
    """The runtime model with as many groups per level as keep its record within MAX_RECORD_BYTES."""
    kept = runtime.MAX_GROUPS
    while True:
        model = runtime.fit(examples, WORKLOAD_LEVELS, max_groups=kept)
        if kept <= 1 or len(orjson.dumps(model.to_params())) < MAX_RECORD_BYTES * 0.9:
            return model, kept
        kept //= 2


MIG_DEMAND_HELD_OUT_MINUTES = 24 * 60  # the last day of the window scores a fit on the days before it


def fit_mig_demand(inp: FitInput) -> ModelRecord:
    """The MIG demand model from the week of metered MIG instances (the demand record's window), with held-
    out scores: a fit on all but the last day, scored on that day."""
    from kgwe.cost.usage import MIG, Period

    since = inp.now - timedelta(minutes=demand.WINDOW_MINUTES)
    usage = inp.store.usage(Period(since, inp.now))
    rows = [
        (iv.mig_profile, iv.count, iv.start.timestamp(), None if iv.end is None else iv.end.timestamp())
        for iv in usage
        if iv.kind == MIG and iv.mig_profile
    ]
    series = demand.series_from_intervals(rows, since.timestamp(), inp.now.timestamp())
    first = next((i for i, s in enumerate(series) if s), len(series))
    series = series[first:]  # the week starts with the first demand metered, not with empty minutes
    notes: list[str] = []
    metrics: dict[str, float] = {}
    model = demand.fit(series)
    past = demand.fit(series[:-MIG_DEMAND_HELD_OUT_MINUTES])
    if past is not None and len(series) > MIG_DEMAND_HELD_OUT_MINUTES:
        metrics = demand.held_out(past, series[-MIG_DEMAND_HELD_OUT_MINUTES:]).metrics()
    else:
        notes.append("less than a day and a half of MIG demand metered: no held-out day to score on yet")
    if model is None:
        notes.append(
            f"fewer than {demand.MIN_MINUTES} minutes of MIG demand metered: no outlook, rebalancing "
            "follows pending pods alone (today's rule)"
        )
    return ModelRecord(
        name=demand.NAME,
        version=demand.VERSION,
        fitted_at=inp.now,
        since=inp.now - timedelta(minutes=len(series)),
        until=inp.now,
        samples=len(series),
        metrics=metrics,
        params=model.to_params() if model is not None else {},
        notes=tuple(notes),
    )
