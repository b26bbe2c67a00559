"""The optimizer inside `kgwe controller`: each model of the registry refitted on its own schedule from the
cost store, its newest record kept in memory for the decisions that use it, and finished GPUWorkload runs
recorded for the runtime model.

Runs on the controller's cost duties (kgwe.reconcile.costs) after a reconcile, as the leader. Nothing here
may fail the controller: a fit that raises keeps the model's last record (logged), a database that is down
keeps the records in memory, and a model never fitted is None — every caller falls back to today's rule.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from kgwe.cost.store import CostStore
from kgwe.errors import KgweError
from kgwe.optimizer.history import FinishedRun
from kgwe.optimizer.record import ModelRecord
from kgwe.optimizer.registry import MODELS, FitInput, ModelEntry, load
from kgwe.optimizer.store import ModelStore

log = logging.getLogger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class OptimizerDuties:
    def __init__(
        self,
        store: CostStore,
        *,
        prometheus_url: str | None = None,
        models: Sequence[ModelEntry] = MODELS,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.store = store
        self.models = ModelStore(store)
        self.entries = tuple(models)
        self.prometheus_url = prometheus_url
        self.now = now
        self._lock = threading.Lock()
        self._records: dict[str, ModelRecord] = {}
        self._loaded = False
        self._tried: dict[str, datetime] = {}  # last fit attempt per model (a failing fit waits its interval)

    def record(self, name: str) -> ModelRecord | None:
        """The newest record of model `name` (None: never fitted, or the store never answered)."""
        self._load()
        with self._lock:
            return self._records.get(name)

    def records(self) -> dict[str, ModelRecord]:
        self._load()
        with self._lock:
            return dict(self._records)

    def _load(self) -> None:
        """The stored records, read once (a restarted controller predicts at once from the last fits)."""
        with self._lock:
            if self._loaded:
                return
            try:
                for entry in self.entries:
                    record = self.models.latest(entry.name)
                    if record is not None:
                        self._records.setdefault(entry.name, record)
                self._loaded = True
            except KgweError as exc:  # the store is down: predict from nothing, read again next time
                log.warning("optimizer: stored models not read: %s", exc)

    def refit_due(self) -> list[str]:
        """Refit every model whose interval has passed since its last fit (or attempt); the names refitted."""
        self._load()
        now = self.now()
        done = []
        for entry in self.entries:
            if entry.fit is None:
                continue
            with self._lock:
                last = self._records.get(entry.name)
                tried = self._tried.get(entry.name)
            since = max((t for t in (tried, last.fitted_at if last else None) if t is not None), default=None)
            if since is not None and (now - since).total_seconds() < entry.refit_seconds:
                continue
            with self._lock:
                self._tried[entry.name] = now
            record = self._fit(entry, last, now)
            if record is None:
                continue
            with self._lock:
                self._records[entry.name] = record
            try:
                self.models.save(record)
            except KgweError as exc:
                log.warning("optimizer: model %s fitted but not stored: %s", entry.name, exc)
            done.append(entry.name)
        return done

    def _fit(self, entry: ModelEntry, last: ModelRecord | None, now: datetime) -> ModelRecord | None:
        assert entry.fit is not None
        try:
            fit = load(entry.fit)
            return fit(FitInput(now, self.store, self.models, self.prometheus_url, last))  # type: ignore[no-any-return]
        except Exception:  # a model is advice: its failure keeps the last record, never stops the controller
            log.exception("optimizer: refit of %s failed; keeping its last record", entry.name)
            return None

    def run_finished(self, run: FinishedRun) -> None:
        """Record a finished GPUWorkload run for the runtime model (never raises)."""
        try:
            self.models.record_run(run)
        except Exception:
            log.exception("optimizer: run of %s/%s not recorded", run.namespace, run.workload)
