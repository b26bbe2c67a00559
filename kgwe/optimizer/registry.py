"""The optimizer's models, one entry each: what it predicts, how it is scored on the public traces, and how
the controller refits it from the cluster's own records. Add a model here and it is refitted on schedule,
printed by `kgwe optimize report` and measured by bench/optimizer.py; nothing else needs to know it.

Entries name their functions as "module:function" and are imported only when used, so a command that runs
one model never loads the others (the registry itself imports none of them: it sits in the core layer).

- `evaluate(data_dir: Path, quick: bool) -> Evaluation`: held-out scores on the public traces in `data_dir`
  (`quick`: a smaller run for tests and `--quick`). `figures` become bench/optimizer.py's JSON keys.
- `fit(FitInput) -> ModelRecord | None`: a refit from the records KGWE keeps (None: nothing to fit yet).
  The controller calls it every `refit_seconds`; an exception keeps the last record and is logged.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kgwe.errors import KgweError
from kgwe.optimizer.record import ModelRecord

HOUR = 3600.0


@dataclass(frozen=True)
class Evaluation:
    """A model's held-out scores: `figures` by name (bench/optimizer.py's JSON keys) and `lines`, what
    `kgwe optimize report --traces` prints for a person (what was compared with what, on which data)."""

    model: str
    figures: Mapping[str, float | int]
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class FitInput:
    """What a fitter may read: the cost store (kgwe.cost.store.CostStore) and the optimizer's records
    (kgwe.optimizer.store.ModelStore) — typed loosely because the registry sits below the I/O layer — the
    controller's Prometheus URL (None: none), the clock, and the model's last record (None: first fit)."""

    now: datetime
    store: Any
    models: Any
    prometheus_url: str | None = None
    previous: ModelRecord | None = None


@dataclass(frozen=True)
class ModelEntry:
    name: str
    predicts: str  # one line for the report: what, from what
    evaluate: str | None = None  # "module:function" (data_dir, quick) -> Evaluation
    fit: str | None = None  # "module:function" (FitInput) -> ModelRecord | None
    refit_seconds: float = 6 * HOUR
    extra: Mapping[str, str] = field(default_factory=dict)


MODELS: tuple[ModelEntry, ...] = (
    ModelEntry(
        "mig-demand",
        "MIG instances each profile's pods will hold over the next hour, and when running pods end "
        "(decision 1: rebalancing ahead of demand)",
        evaluate="kgwe.optimizer.demand_eval:evaluate",
        fit="kgwe.optimizer.fitters:fit_mig_demand",
        refit_seconds=1 * HOUR,
    ),
    ModelEntry(
        "runtime",
        "a GPUWorkload's duration quantiles from similar finished runs, with a prior where there are none "
        "(decision 3: runtime and cost at admission)",
        evaluate="kgwe.optimizer.runtime_eval:evaluate",
        fit="kgwe.optimizer.fitters:fit_runtime",
        refit_seconds=1 * HOUR,
    ),
    ModelEntry(
        "usage",
        "a pod's later peak GPU memory and p95 compute (P50, P90) from its first hour and its group's "
        "history (decision 2: rightsizing before a week of history)",
        evaluate="kgwe.optimizer.usage_eval:evaluate",
        fit="kgwe.optimizer.usage_fit:fit_usage",
        refit_seconds=6 * HOUR,
    ),
    ModelEntry(
        "classes",
        "training, inference, interactive or idle holder, from a pod's telemetry (decision 4)",
        evaluate="kgwe.optimizer.classes_eval:evaluate",
    ),
    ModelEntry(
        "spend",
        "each team's daily spend over the next week (the budget forecast), against seasonal-naive",
        evaluate="kgwe.optimizer.spend_eval:evaluate",
    ),
)


def entry(name: str) -> ModelEntry:
    for m in MODELS:
        if m.name == name:
            return m
    raise KgweError(f"no optimizer model {name!r} (have: {', '.join(m.name for m in MODELS)})")


def load(ref: str) -> Callable[..., Any]:
    """The function a "module:function" reference names."""
    module, _, name = ref.partition(":")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise KgweError(f"optimizer registry: {ref} is not a function")
    return fn  # type: ignore[no-any-return]
