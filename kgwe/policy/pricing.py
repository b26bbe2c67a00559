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
    product: LabelValue  # GFD nvidia.com/gpu.product value
    on_demand_per_hour: Money
    spot_per_hour: Money | None = None


class PricingCatalogSpec(KgweModel):
    currency: str = Field(default=DEFAULT_CURRENCY, pattern=CURRENCY_PATTERN)
    gpus: list[GPUPrice] = Field(min_length=1)
    mig_pricing: MigPricing = DEFAULT_MIG_PRICING
    idle_cost: IdleCost = DEFAULT_IDLE_COST
    spot_node_selector: LabelMap = Field(default_factory=dict)  # nodes priced at spotPerHour
    # Share of spot nodes the provider reclaims in a month: the assumption behind the spot advice's
    # interruption risk (providers publish it per instance type, e.g. AWS's "frequency of interruption").
    spot_interruption_rate: Percent = Field(
        default=Decimal(DEFAULT_SPOT_INTERRUPTION_PERCENT),
        json_schema_extra={"default": f"{DEFAULT_SPOT_INTERRUPTION_PERCENT}%"},
    )

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
    KIND: ClassVar[str] = "PricingCatalog"
    kind: Literal["PricingCatalog"] = "PricingCatalog"
    metadata: ObjectMeta
    spec: PricingCatalogSpec
