"""GPU prices and how much of a GPU a usage interval holds.

Rules (documented in docs of the PricingCatalog kind):
- A whole GPU costs the product's hourly price: on-demand, or spot when the node carries a spot label.
- A MIG instance costs a share of its parent GPU: `ComputeSlices` = compute slices / compute slots
  (3g.40gb on H100 = 3/7), `MemorySlices` = memory slices / memory slots (3g.40gb = 4/8), `Max` = the
  larger of the two (an instance blocks whichever resource it takes more of). Default ComputeSlices.
- A shared GPU (`nvidia.com/gpu.shared`) costs its `kgwe.nvidia.io/gpu-milli` share / 1000.
- Idle capacity (node GPU-hours nobody held) is either its own line (`Separate`, OpenCost `__idle__`) or
  shared across the period's allocations in proportion to their cost (`ShareByAllocation`,
  OpenCost shareIdle).
Shares are exact Fractions; money becomes Decimal cents only once, at the end of a chargeback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

from kgwe import money
from kgwe.cost.usage import MIG, SHARED
from kgwe.errors import KgweError
from kgwe.gpu.products import base_product, find_price
from kgwe.vocab import (
    CAPACITY_TYPE_LABEL,
    DEFAULT_CURRENCY,
    DEFAULT_IDLE_COST,
    DEFAULT_MIG_PRICING,
    DEFAULT_SPOT_INTERRUPTION_PERCENT,
    IDLE_COST,
    MIG_PRICING,
)

# Common node labels that mark spot/preemptible capacity (key, value); value None = any value.
DEFAULT_SPOT_LABELS: tuple[tuple[str, str | None], ...] = (
    (CAPACITY_TYPE_LABEL, "spot"),
    ("karpenter.sh/capacity-type", "spot"),
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
    ("node.kubernetes.io/lifecycle", "spot"),
)


def parse_money(text: object, what: str) -> Decimal:
    """A price (rules in kgwe.money), or a KgweError naming the field."""
    try:
        return money.parse_money(text)
    except ValueError as exc:
        raise KgweError(f"{what}: {text!r} is not a price: {exc}") from None


@dataclass(frozen=True)
class GpuPrice:
    product: str
    on_demand_per_hour: Decimal
    spot_per_hour: Decimal | None = None

    def per_hour(self, spot: bool) -> Decimal:
        if spot and self.spot_per_hour is not None:
            return self.spot_per_hour
        return self.on_demand_per_hour


# (product, mig profile) -> (compute slices, compute slots, memory slices, memory slots)
SliceLookup = Callable[[str, str], tuple[int, int, int, int]]


def catalog_slices(product: str, profile: str) -> tuple[int, int, int, int]:
    """Slice geometry from the MIG catalog (kgwe.gpu.catalog)."""
    from kgwe.gpu import catalog

    model = catalog.model_for_product(base_product(product))
    if model is None:
        raise KgweError(f"unknown GPU product {product!r}: not in the MIG catalog")
    prof = model.profiles.get(profile)
    if prof is None:
        raise KgweError(f"MIG profile {profile!r} does not exist on {model.key}")
    return prof.compute_slices, model.compute_slots, prof.memory_slices, model.memory_slots


@dataclass(frozen=True)
class PriceBook:
    """Everything pricing needs, as plain data."""

    currency: str
    gpus: Mapping[str, GpuPrice]
    mig_pricing: str = DEFAULT_MIG_PRICING
    idle_cost: str = DEFAULT_IDLE_COST
    spot_labels: tuple[tuple[str, str | None], ...] = DEFAULT_SPOT_LABELS
    spot_selector: tuple[tuple[str, str], ...] | None = None  # the catalog's spotNodeSelector: all must match
    slices: SliceLookup = field(default=catalog_slices, compare=False)
    spot_interruption_percent: Decimal = Decimal(DEFAULT_SPOT_INTERRUPTION_PERCENT)  # assumed, per month

    def __post_init__(self) -> None:
        if self.mig_pricing not in MIG_PRICING:
            raise KgweError(f"migPricing must be one of {', '.join(MIG_PRICING)}, got {self.mig_pricing!r}")
        if self.idle_cost not in IDLE_COST:
            raise KgweError(f"idleCost must be one of {', '.join(IDLE_COST)}, got {self.idle_cost!r}")

    def price(self, product: str) -> GpuPrice | None:
        return find_price(self.gpus, product)

    def is_spot(self, labels: Mapping[str, str]) -> bool:
        if self.spot_selector:
            return all(labels.get(k) == v for k, v in self.spot_selector)
        return any(k in labels and (v is None or labels[k] == v) for k, v in self.spot_labels)

    def gpu_share(self, product: str, kind: str, mig_profile: str | None, gpu_milli: int | None) -> Fraction:
        """How much of one physical GPU a single unit of this resource is."""
        if kind == MIG:
            c, c_slots, m, m_slots = self.slices(product, mig_profile or "")
            compute, memory = Fraction(c, c_slots), Fraction(m, m_slots)
            by_mode = {"ComputeSlices": compute, "MemorySlices": memory, "Max": max(compute, memory)}
            return by_mode[self.mig_pricing]
        if kind == SHARED:
            return Fraction(gpu_milli or 0, 1000)
        return Fraction(1)


def pricebook(
    prices: Iterable[Mapping[str, Any]],
    *,
    currency: str = DEFAULT_CURRENCY,
    mig_pricing: str = DEFAULT_MIG_PRICING,
    idle_cost: str = DEFAULT_IDLE_COST,
    spot_labels: tuple[tuple[str, str | None], ...] = DEFAULT_SPOT_LABELS,
    spot_selector: tuple[tuple[str, str], ...] | None = None,
    slices: SliceLookup = catalog_slices,
    spot_interruption_percent: Decimal = Decimal(DEFAULT_SPOT_INTERRUPTION_PERCENT),
) -> PriceBook:
    """Build a PriceBook from catalog-style rows {product, onDemandPerHour, spotPerHour?}."""
    gpus: dict[str, GpuPrice] = {}
    for i, row in enumerate(prices):
        product = str(row.get("product") or "").strip()
        if not product:
            raise KgweError(f"gpus[{i}]: product is required")
        if product in gpus:
            raise KgweError(f"gpus[{i}]: product {product!r} is priced twice")
        on_demand = parse_money(row.get("onDemandPerHour"), f"gpus[{i}] ({product}).onDemandPerHour")
        spot_raw = row.get("spotPerHour")
        spot = None if spot_raw is None else parse_money(spot_raw, f"gpus[{i}] ({product}).spotPerHour")
        gpus[product] = GpuPrice(product, on_demand, spot)
    return PriceBook(
        currency, gpus, mig_pricing, idle_cost, spot_labels, spot_selector, slices, spot_interruption_percent
    )


def _get(obj: object, *names: str, default: object = None) -> object:
    for name in names:
        if isinstance(obj, Mapping) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


def pricebook_from_catalog(catalog: object) -> PriceBook:
    """Adapt a PricingCatalog (kgwe.policy model, or its YAML as a dict) into a PriceBook."""
    spec = _get(catalog, "spec", default=catalog)
    rows = []
    gpus = _get(spec, "gpus", default=()) or ()
    for gpu in gpus if isinstance(gpus, Iterable) else ():
        rows.append(
            {
                "product": _get(gpu, "product"),
                "onDemandPerHour": _get(gpu, "onDemandPerHour", "on_demand_per_hour"),
                "spotPerHour": _get(gpu, "spotPerHour", "spot_per_hour"),
            }
        )
    selector = _get(spec, "spotNodeSelector", "spot_node_selector")
    spot_labels = DEFAULT_SPOT_LABELS
    spot_selector = None
    if isinstance(selector, Mapping) and selector:
        spot_selector = tuple((str(k), str(v)) for k, v in selector.items())
    return pricebook(
        rows,
        currency=str(_get(spec, "currency", default=DEFAULT_CURRENCY)),
        mig_pricing=str(_enum_value(_get(spec, "migPricing", "mig_pricing", default=DEFAULT_MIG_PRICING))),
        idle_cost=str(_enum_value(_get(spec, "idleCost", "idle_cost", default=DEFAULT_IDLE_COST))),
        spot_labels=spot_labels,
        spot_selector=spot_selector,
        spot_interruption_percent=_interruption_percent(
            _get(spec, "spotInterruptionRate", "spot_interruption_rate", default=None)
        ),
    )


def _interruption_percent(value: object) -> Decimal:
    """The catalog's spotInterruptionRate ("20%" in YAML, Decimal 20 from the model), or the default."""
    if value is None:
        return Decimal(DEFAULT_SPOT_INTERRUPTION_PERCENT)
    from kgwe.policy.types import parse_percent

    try:
        percent = value if isinstance(value, Decimal) else parse_percent(value)
    except ValueError as exc:
        raise KgweError(f"spotInterruptionRate: {exc}") from None
    if not 0 <= percent <= 100:
        raise KgweError(f"spotInterruptionRate: a share of nodes is 0% to 100%, got {percent}%")
    return percent


def _enum_value(value: object) -> object:
    return getattr(value, "value", value)
