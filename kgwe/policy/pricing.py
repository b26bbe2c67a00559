"""PricingCatalog: what one GPU-hour of each product costs, and how MIG slices and idle time are priced."""

from __future__ import annotations

from decimal import Decimal
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from kgwe.gpu.products import find_price
from kgwe.policy.base import KgweModel, KgweObject, ObjectMeta
from kgwe.policy.budget import CURRENCY_PATTERN
from kgwe.policy.types import LabelMap, LabelValue, Money, Percent
from kgwe.vocab import (
    DEFAULT_CURRENCY,
    DEFAULT_IDLE_COST,
    DEFAULT_MIG_PRICING,
    DEFAULT_SPOT_INTERRUPTION_PERCENT,
    IdleCost,
    MigPricing,
)


class GPUPrice(KgweModel):
    """What one GPU-hour of a product costs."""

    product: LabelValue
    """GFD `nvidia.com/gpu.product` name (a label value); not priced twice (ignoring case)."""
    on_demand_per_hour: Money
    """The price of one whole GPU-hour, a quoted decimal (a bare YAML number is refused: it was already
    rounded in binary)."""
    spot_per_hour: Money | None = None
    """The price on spot nodes (default: the on-demand price)."""


class PricingCatalogSpec(KgweModel):
    """Prices per GPU product, and how MIG slices, idle time and spot nodes are priced."""

    currency: str = Field(default=DEFAULT_CURRENCY, pattern=CURRENCY_PATTERN)
    """ISO 4217 code of every amount."""
    gpus: list[GPUPrice] = Field(min_length=1)
    """The price of each GPU product (at least one)."""
    mig_pricing: MigPricing = DEFAULT_MIG_PRICING
    """A MIG instance costs its compute slices out of its GPU's compute slots (3g.40gb on H100 = 3/7),
    its memory slices out of the memory slots (4/8), or the larger of the two."""
    idle_cost: IdleCost = DEFAULT_IDLE_COST
    """Idle GPU time as its own `__idle__` line, or spread over the period's lines in proportion to their
    cost."""
    spot_node_selector: LabelMap = Field(default_factory=dict)
    """Nodes carrying all these labels are spot (priced at `spotPerHour`); empty: the usual spot labels
    (`karpenter.sh/capacity-type=spot`, `cloud.google.com/gke-spot=true`, ...)."""
    spot_interruption_rate: Percent = Field(
        default=Decimal(DEFAULT_SPOT_INTERRUPTION_PERCENT),
        json_schema_extra={"default": f"{DEFAULT_SPOT_INTERRUPTION_PERCENT}%"},
    )
    """Share of spot nodes the provider reclaims in a month (0-100%): the assumption behind the spot
    advice's interruption risk. Providers publish it per instance type (AWS's Spot Instance Advisor:
    "frequency of interruption", in bands < 5% ... > 20%); the default is the lower edge of the highest
    band."""

    @field_validator("spot_interruption_rate")
    @classmethod
    def _at_most_all(cls, v: Decimal) -> Decimal:
        if v > 100:
            raise ValueError(f"a share of nodes is at most 100%, got {v}%")
        return v

    def price_for(self, product: str) -> GPUPrice | None:
        """The price of a node's GFD product, by the rule the chargeback uses (kgwe.gpu.products)."""
        return find_price({price.product: price for price in self.gpus}, product)

    def hourly(self, product: str, *, spot: bool = False) -> Decimal | None:
        price = self.price_for(product)
        if price is None:
            return None
        if spot and price.spot_per_hour is not None:
            return price.spot_per_hour
        return price.on_demand_per_hour


class PricingCatalog(KgweObject):
    """What one GPU-hour of each product costs, and how MIG slices, idle time and spot nodes are priced."""

    KIND: ClassVar[str] = "PricingCatalog"
    kind: Literal["PricingCatalog"] = "PricingCatalog"
    metadata: ObjectMeta
    spec: PricingCatalogSpec
    """The prices and how they are applied."""
