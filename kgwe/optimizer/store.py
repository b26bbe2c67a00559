"""The optimizer's records in the cost store's database: fitted models with their provenance, and finished
GPUWorkload runs (tables in kgwe.optimizer.tables, created by the cost store's migrations).

An edge: reads and writes rows, converts them to the plain types of kgwe.optimizer.record and .history.
A stored model record that cannot be decoded is skipped with its reason, never raised to the controller.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import delete, func
from sqlmodel import col, select

from kgwe.cost.store import CostStore
from kgwe.cost.usage import from_epoch, to_epoch
from kgwe.optimizer.history import FinishedRun
from kgwe.optimizer.record import ModelRecord, ModelRecordError
from kgwe.optimizer.tables import ModelRow, RunRow

log = logging.getLogger(__name__)

KEEP_RECORDS = 50  # per model: a history of refits to compare, bounded
MAX_RUNS_READ = 200_000  # the newest runs a fit reads at most


class ModelStore:
    """Model records and run history on the database of `store` (SQLite or PostgreSQL)."""

    def __init__(self, store: CostStore) -> None:
        self.store = store

    # -- model records ---------------------------------------------------------------------------
    def save(self, record: ModelRecord) -> None:
        """Store `record` (encoded and bounded first) and drop that model's oldest beyond KEEP_RECORDS."""
        data = record.to_json().decode()
        with self.store.session() as s:
            s.add(ModelRow(name=record.name, fitted_s=to_epoch(record.fitted_at), record=data))
            s.flush()
            newest = col(ModelRow.fitted_s).desc(), col(ModelRow.id).desc()
            keep = select(ModelRow.id).where(ModelRow.name == record.name).order_by(*newest)
            kept = list(s.exec(keep.limit(KEEP_RECORDS)).all())
            s.execute(
                delete(ModelRow).where(col(ModelRow.name) == record.name, col(ModelRow.id).not_in(kept))
            )
            s.commit()

    def latest(self, name: str) -> ModelRecord | None:
        """The newest readable record of model `name` (None: never fitted, or none readable)."""
        for record in self.history(name, KEEP_RECORDS):
            return record
        return None

    def history(self, name: str, limit: int = KEEP_RECORDS) -> list[ModelRecord]:
        """Model `name`'s readable records, newest first."""
        query = select(ModelRow).where(ModelRow.name == name)
        query = query.order_by(col(ModelRow.fitted_s).desc(), col(ModelRow.id).desc()).limit(limit)
        with self.store.session() as s:
            rows = list(s.exec(query).all())
        return [r for r in (_decode(row) for row in rows) if r is not None]

    def names(self) -> list[str]:
        with self.store.session() as s:
            return sorted(str(n) for n in s.exec(select(ModelRow.name).distinct()).all())

    # -- finished runs ---------------------------------------------------------------------------
    def record_run(self, run: FinishedRun) -> bool:
        """Store a finished run (once per workload uid: a second report of the same uid replaces the
        first, so a workload that restarts and finishes again counts once, as it ends). False: refused."""
        problem = run.problem()
        if problem is not None:
            log.warning("run of %s/%s not recorded: %s", run.namespace, run.workload, problem)
            return False
        row = RunRow(
            uid=run.uid[:64],
            namespace=run.namespace[:63],
            workload=run.workload[:253],
            runtime=run.runtime[:253],
            workload_type=run.workload_type[:63],
            shape=run.shape[:128],
            pods=run.pods,
            gpu_milli=run.gpu_milli,
            started_s=to_epoch(run.started),
            ended_s=to_epoch(run.ended),
            outcome=run.outcome[:16],
        )
        with self.store.session() as s:
            s.merge(row)
            s.commit()
        return True

    def runs(self, since: datetime, until: datetime) -> list[FinishedRun]:
        """Runs that ended in [since, until] (a run that ended this very second counts), oldest first (at
        most MAX_RUNS_READ, the newest)."""
        lo, hi = to_epoch(since), to_epoch(until)
        query = select(RunRow).where(col(RunRow.ended_s) >= lo, col(RunRow.ended_s) <= hi)
        query = query.order_by(col(RunRow.ended_s).desc()).limit(MAX_RUNS_READ)
        with self.store.session() as s:
            rows = list(s.exec(query).all())
        return [_run(r) for r in reversed(rows)]

    def run_count(self) -> int:
        with self.store.session() as s:
            return int(s.exec(select(func.count()).select_from(RunRow)).one())


def record_runs(models: ModelStore, runs: Iterable[FinishedRun]) -> int:
    """Store every run that can be learned from; how many were stored."""
    return sum(1 for run in runs if models.record_run(run))


def _decode(row: ModelRow) -> ModelRecord | None:
    try:
        return ModelRecord.from_json(row.record)
    except ModelRecordError as exc:
        log.warning("stored model record %s skipped: %s", row.id, exc)
        return None


def _run(row: RunRow) -> FinishedRun:
    return FinishedRun(
        uid=row.uid,
        namespace=row.namespace,
        workload=row.workload,
        runtime=row.runtime,
        workload_type=row.workload_type,
        shape=row.shape,
        pods=row.pods,
        gpu_milli=row.gpu_milli,
        started=from_epoch(row.started_s),
        ended=from_epoch(row.ended_s),
        outcome=row.outcome,
    )
