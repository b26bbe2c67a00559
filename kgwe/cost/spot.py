"""Spot advice: which GPUWorkloads could run on spot capacity, what that would save, and what it risks (pure).

Who may move (a workload that survives losing a node):
- batch kinds (Training, DistributedTraining, Batch, HPC) that keep checkpoints (`checkpointInterval`) or
  that KGWE restarts after a failure (`retryPolicy.maxRetries` > 0): an interruption restarts the gang;
- serving (Inference) with two or more replicas per role: every replica but one per role, so an interruption
  never takes the service down;
- never Interactive (a person's session), a single-replica service, or a batch job nothing restarts.

The saving is what the GPU-hours it held on on-demand nodes would have cost less at the PricingCatalog's spot
price, in the period and per month at the period's rate (730 hours a month). The interruption risk is an
assumption, stated with every figure: the catalog's `spotInterruptionRate` (share of spot nodes reclaimed in a
month), each pod on its own node. An interruption of a checkpointed batch job loses half a checkpoint interval
of the whole gang's GPUs on average (rerun at the spot price; the restart itself not counted); without
checkpoints it repeats the run so far, which is not known ahead and not priced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from kgwe.cost.allocate import cents_to_decimal, quantized, round_cents
from kgwe.cost.chargeback import KeyUsage
from kgwe.cost.pricing import PriceBook
from kgwe.cost.rightsizing import HOURS_PER_MONTH
from kgwe.cost.workload_facts import WorkloadFacts

INTERACTIVE = "Interactive"
_HOUR = 3600


@dataclass(frozen=True)
class Eligibility:
    movable_share: Fraction  # of the workload's GPU time that could run on spot (0: none)
    pods_moved: int
    reason: str


@dataclass(frozen=True)
class SpotAdvice:
    namespace: str
    workload: str
    team: str
    workload_type: str
    movable: bool
    reason: str
    on_demand_gpu_hours: Decimal  # held on on-demand nodes in the period (all of the workload's pods)
    saving: Decimal  # in the period, of the movable share
    saving_per_month: Decimal  # at the period's rate
    interruptions_per_month: Decimal  # expected, under the assumption, at the period's rate
    rework_per_month: Decimal | None  # expected cost of work redone; None: not known ahead (no checkpoints)
    net_per_month: Decimal | None  # saving - rework, when the rework is known
    unpriced: tuple[str, ...] = ()  # GPU products it used that have no spot price


def eligibility(w: WorkloadFacts) -> Eligibility:
    """Whether, and how much of, a workload could run on spot, and why (the rules of the module doc)."""
    if w.batch:
        if w.checkpoint_interval_seconds:
            minutes = w.checkpoint_interval_seconds / 60
            return Eligibility(Fraction(1), w.pods, f"restarts from checkpoints every {minutes:g} min")
        if w.max_retries > 0:
            return Eligibility(
                Fraction(1),
                w.pods,
                f"KGWE restarts it (up to {w.max_retries}×); no checkpoints: a restart repeats the run",
            )
        return Eligibility(
            Fraction(0), 0, "no checkpoints and retryPolicy.maxRetries 0: an interruption ends it"
        )
    if w.workload_type == INTERACTIVE:
        return Eligibility(Fraction(0), 0, "interactive: an interruption loses a person's session")
    moved = sum(max(0, r.replicas - 1) for r in w.roles)
    if moved == 0:
        return Eligibility(Fraction(0), 0, "one replica: an interruption takes the service down")
    return Eligibility(
        Fraction(moved, w.pods),
        moved,
        f"{moved} of {w.pods} replicas on spot, one per role kept on-demand",
    )


def advise(
    w: WorkloadFacts,
    team: str,
    pods: list[KeyUsage],
    book: PriceBook,
    elapsed_seconds: int,
) -> SpotAdvice:
    """The advice for one workload from its pods' priced usage over `elapsed_seconds` of the period."""
    rule = eligibility(w)
    on_demand: dict[str, Fraction] = {}
    for use in pods:
        for product, seconds in use.on_demand_gpu_seconds.items():
            on_demand[product] = on_demand.get(product, Fraction(0)) + seconds
    saving = Fraction(0)
    unpriced = []
    for product, seconds in sorted(on_demand.items()):
        price = book.price(product)
        if price is None or price.spot_per_hour is None:
            unpriced.append(product)
            continue
        saving += (
            rule.movable_share * seconds / _HOUR * Fraction(price.on_demand_per_hour - price.spot_per_hour)
        )
    to_month = Fraction(int(HOURS_PER_MONTH) * _HOUR, max(1, elapsed_seconds))
    saving_month = saving * to_month
    interruptions, rework = _risk(w, rule, on_demand, book, elapsed_seconds)
    rework_month = None if rework is None else rework * to_month
    return SpotAdvice(
        namespace=w.namespace,
        workload=w.name,
        team=team,
        workload_type=w.workload_type,
        movable=rule.movable_share > 0 and saving > 0,
        reason=rule.reason if rule.movable_share == 0 or saving > 0 else _why_no_saving(on_demand, unpriced),
        on_demand_gpu_hours=quantized(sum(on_demand.values(), Fraction(0)) / _HOUR, "0.001"),
        saving=cents_to_decimal(round_cents(saving)),
        saving_per_month=cents_to_decimal(round_cents(saving_month)),
        interruptions_per_month=quantized(interruptions * to_month, "0.01"),
        rework_per_month=None if rework_month is None else cents_to_decimal(round_cents(rework_month)),
        net_per_month=(
            None if rework_month is None else cents_to_decimal(round_cents(saving_month - rework_month))
        ),
        unpriced=tuple(unpriced),
    )


def _risk(
    w: WorkloadFacts,
    rule: Eligibility,
    on_demand: Mapping[str, Fraction],
    book: PriceBook,
    elapsed_seconds: int,
) -> tuple[Fraction, Fraction | None]:
    """(expected interruptions, expected cost of redone work) over the elapsed period had the movable part
    run on spot at the assumed rate. The workload ran a fraction of the period: its on-demand GPU-seconds
    over what its pods hold in that time while running."""
    product = max(on_demand, key=lambda p: on_demand[p], default=None)
    if product is None or rule.pods_moved == 0:
        return Fraction(0), Fraction(0)
    gpus = w.gpus(book, product)
    if gpus <= 0:
        return Fraction(0), Fraction(0)
    running = min(Fraction(1), sum(on_demand.values(), Fraction(0)) / (gpus * max(1, elapsed_seconds)))
    month_share = Fraction(max(1, elapsed_seconds), int(HOURS_PER_MONTH) * _HOUR)
    rate = Fraction(book.spot_interruption_percent) / 100
    interruptions = rate * rule.pods_moved * running * month_share
    if not w.batch:
        return interruptions, Fraction(0)  # a replica is lost until rescheduled; nothing is redone
    if not w.checkpoint_interval_seconds:
        return interruptions, None
    price = book.price(product)
    spot = (
        Fraction(price.spot_per_hour)
        if price is not None and price.spot_per_hour is not None
        else Fraction(0)
    )
    lost_gpu_hours = gpus * Fraction(w.checkpoint_interval_seconds, 2 * _HOUR)
    return interruptions, interruptions * lost_gpu_hours * spot


def _why_no_saving(on_demand: Mapping[str, Fraction], unpriced: list[str]) -> str:
    if not on_demand:
        return "no GPU time on on-demand nodes this period"
    return f"no spot price in the PricingCatalog for {', '.join(unpriced)}"


def assumption(book: PriceBook) -> str:
    """The interruption assumption, as the reports state it."""
    rate = book.spot_interruption_percent.normalize()
    return (
        f"spot nodes are reclaimed at {rate:f}% a month each (PricingCatalog spotInterruptionRate), "
        "each pod on its own node"
    )
