"""Runtime and cost at admission (decision 3), on plain data: which finished runs a GPUWorkload is like, what
it is expected to cost and its P90, and whether a budget holds or refuses it.

A GPUWorkload is grouped as the runtime model groups runs (kgwe.optimizer.runtime): its runtime (the
WorkloadRuntime it names, else its workload type), that in its namespace, and that with its GPU shape. Its
cost is its GPUs (every pod's share of a physical GPU, as metering prices them) x the predicted duration x
the catalog's on-demand price of the product it asks for — or, when it names none the catalog knows, the
dearest product the catalog lists, said in the reason. A budget's `predictedCostAdmission` (off by
default) compares the expected cost with what remains of the budget this period.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

from kgwe.cost.pricing import PriceBook
from kgwe.cost.usage import MIG, SHARED, WHOLE
from kgwe.cost.workload_facts import RoleFacts
from kgwe.errors import KgweError
from kgwe.optimizer.history import FinishedRun
from kgwe.optimizer.prediction import Prediction
from kgwe.optimizer.runtime import Level, RuntimeModel, expected_seconds, fit
from kgwe.timestamps import parse_rfc3339
from kgwe.vocab import PREDICTED_COST_ADMISSION

WORKLOAD_LEVELS = (
    Level("runtime", "of {0}"),
    Level("namespace", "of {0} in {1}"),
    Level("shape", "of {0} in {1} shaped {2}"),
)
OFF, HOLD, REFUSE = PREDICTED_COST_ADMISSION  # GPUBudget spec.predictedCostAdmission
HELD_REASON = "PredictedCostHeld"
REFUSED_REASON = "PredictedCostOverBudget"
CENT = Decimal("0.01")


@dataclass(frozen=True)
class WorkloadShape:
    """What the runtime model and the cost need of a GPUWorkload (kgwe.cost.workload_facts.RoleFacts)."""

    namespace: str
    runtime: str  # the WorkloadRuntime's name, "" without one
    workload_type: str
    roles: tuple[RoleFacts, ...]
    product: str | None = None  # the GPU product (or family) it asks for

    @property
    def kind(self) -> str:
        """What the first level groups by: its runtime, else its workload type."""
        return f"runtime {self.runtime}" if self.runtime else f"workload type {self.workload_type}"

    @property
    def shape(self) -> str:
        """`2 x whole:1`, `1 x mig:3g.40gb + 4 x whole:8`: pods x each pod's GPU request, per role."""
        return " + ".join(f"{r.replicas} x {_unit(r)}" for r in self.roles)

    def keys(self) -> tuple[tuple[str, ...], ...]:
        return ((self.kind,), (self.kind, self.namespace), (self.kind, self.namespace, self.shape))

    @property
    def pods(self) -> int:
        return sum(r.replicas for r in self.roles)


def _unit(role: RoleFacts) -> str:
    if role.kind == MIG:
        return f"{MIG}:{role.mig_profile}" + (f"x{role.count}" if role.count != 1 else "")
    if role.kind == SHARED:
        return f"{SHARED}:{role.gpu_milli}"
    return f"{WHOLE}:{role.count}"


def shape_of(obj: Mapping[str, Any]) -> WorkloadShape:
    """A GPUWorkload as the API returns it (or as a manifest has it); KgweError when it is not readable."""
    from kgwe.cost.workload_facts import facts_from_object

    facts = facts_from_object(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    runtime = spec.get("runtime") or status.get("runtime") or ""
    req = spec.get("gpuRequirements") or {}
    product = req.get("product") if isinstance(req, Mapping) else None
    return WorkloadShape(
        facts.namespace,
        str(runtime),
        facts.workload_type,
        facts.roles,
        str(product) if product else None,
    )


@dataclass(frozen=True)
class CostPrediction:
    """Expected cost (the mean of the predicted duration) and its P90, in the catalog's currency."""

    expected: Decimal
    p90: Decimal
    currency: str
    gpus: Fraction
    price_per_gpu_hour: Decimal
    product: str
    note: str = ""  # how the price was chosen, when it was not the product the workload names

    def to_status(self) -> dict[str, str]:
        out = {
            "expected": str(self.expected),
            "p90": str(self.p90),
            "currency": self.currency,
            "gpus": _gpus_text(self.gpus),
            "pricePerGPUHour": str(self.price_per_gpu_hour),
            "product": self.product,
        }
        if self.note:
            out["note"] = self.note
        return out


def _gpus_text(gpus: Fraction) -> str:
    return f"{float(gpus):g}"


def gpus_held(shape: WorkloadShape, book: PriceBook, product: str) -> Fraction:
    """Physical GPUs all its pods hold, priced as metering prices them (a MIG instance its slices)."""
    total = Fraction(0)
    for r in shape.roles:
        try:
            share = book.gpu_share(product, r.kind, r.mig_profile, r.gpu_milli)
        except KgweError:  # a product the MIG catalog does not know: a MIG instance priced as a whole GPU
            share = Fraction(1)
        total += r.replicas * r.count * share
    return total


def predict_cost(shape: WorkloadShape, duration: Prediction, book: PriceBook) -> CostPrediction | None:
    """The expected cost and its P90 (None when the catalog prices nothing)."""
    product, note = _priced_product(shape, book)
    if product is None:
        return None
    price = book.price(product)
    if price is None:
        return None
    rate = price.per_hour(False)
    gpus = gpus_held(shape, book, product)
    expected = _money(gpus, rate, expected_seconds(duration))
    p90 = _money(gpus, rate, duration.at(0.9))
    return CostPrediction(expected, p90, book.currency, gpus, rate, product, note)


def _priced_product(shape: WorkloadShape, book: PriceBook) -> tuple[str | None, str]:
    if shape.product and book.price(shape.product) is not None:
        return shape.product, ""
    if not book.gpus:
        return None, ""
    dearest = max(book.gpus.values(), key=lambda p: (p.on_demand_per_hour, p.product))
    asked = (
        f"it asks for {shape.product}, which the catalog does not price" if shape.product else "no product"
    )
    return dearest.product, f"{asked}: priced at the dearest product of the catalog, {dearest.product}"


def _money(gpus: Fraction, rate: Decimal, seconds: float) -> Decimal:
    hours = Decimal(repr(max(0.0, seconds))) / Decimal(3600)
    value = Decimal(gpus.numerator) / Decimal(gpus.denominator) * rate * hours
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def prediction_status(duration: Prediction, cost: CostPrediction | None, now: datetime) -> dict[str, Any]:
    """status.prediction of a GPUWorkload: the duration quantiles, the expected cost and its P90, and why."""
    from kgwe.timestamps import format_rfc3339

    out: dict[str, Any] = {
        "durationSeconds": {
            "expected": round(expected_seconds(duration)),
            **{f"p{round(q * 100)}": round(v) for q, v in sorted(duration.quantiles.items())},
        },
        "reason": duration.reason,
        "samples": duration.samples,
        "predictedAt": format_rfc3339(now),
    }
    if duration.fallback is not None:
        out["fallback"] = duration.fallback
    if cost is not None:
        out["cost"] = cost.to_status()
    return out


def predict(model: RuntimeModel | None, shape: WorkloadShape) -> Prediction:
    """The duration of a run of `shape` (the prior and why, without a model)."""
    return (model or fit([], WORKLOAD_LEVELS)).predict(shape.keys())


@dataclass(frozen=True)
class BudgetRoom:
    """What remains of the budget governing a namespace this period, and what that budget does."""

    budget: str
    remaining: Decimal
    currency: str
    action: str  # one of PREDICTED_COST_ADMISSION


def budget_decision(cost: CostPrediction | None, room: BudgetRoom | None) -> tuple[str, str, str] | None:
    """(action, reason, message) when the budget holds or refuses the workload; None to admit it. Off,
    no budget, no price or another currency admit (today's rule: the quota alone decides)."""
    if room is None or room.action not in (HOLD, REFUSE) or cost is None:
        return None
    if cost.currency != room.currency or cost.expected <= room.remaining:
        return None
    remains = max(Decimal(0), room.remaining).quantize(CENT)
    message = (
        f"expected cost {cost.expected} {cost.currency} (P90 {cost.p90}) exceeds the {remains} "
        f"{room.currency} left of GPUBudget {room.budget} this period"
    )
    if room.action == HOLD:
        return HOLD, HELD_REASON, message + ": held until the budget has room"
    return REFUSE, REFUSED_REASON, message + ": refused (spec.predictedCostAdmission: Refuse)"


def finished_run(obj: Mapping[str, Any], outcome: str, ended: datetime) -> FinishedRun | None:
    """The finished run a GPUWorkload's status shows (its last run from runStartTime to `ended`); None when
    it is not one the runtime model can learn from (never started, unreadable)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    started = parse_rfc3339(status.get("runStartTime"))
    if started is None or not meta.get("uid"):
        return None
    try:
        shape = shape_of(obj)
    except KgweError:
        return None
    gpus = sum(
        r.replicas * r.count * (r.gpu_milli if r.kind == SHARED and r.gpu_milli else 1000)
        for r in shape.roles
    )
    return FinishedRun(
        uid=str(meta["uid"]),
        namespace=shape.namespace,
        workload=str(meta.get("name") or ""),
        runtime=shape.runtime,
        workload_type=shape.workload_type,
        shape=shape.shape,
        pods=shape.pods,
        gpu_milli=gpus,
        started=started,
        ended=ended,
        outcome=outcome,
    )


def run_keys(run: FinishedRun) -> tuple[tuple[str, ...], ...]:
    """The keys a recorded run is grouped under (the same as `WorkloadShape.keys` of its workload)."""
    kind = f"runtime {run.runtime}" if run.runtime else f"workload type {run.workload_type}"
    return ((kind,), (kind, run.namespace), (kind, run.namespace, run.shape))
