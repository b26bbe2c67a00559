"""PricingCatalog: what one GPU-hour of each product costs, and how MIG slices and idle time are priced."""

from __future__ import annotations

from decimal import Decimal
from typing import ClassVar, Literal

from pydantic import Field

from kgwe.policy.base import KgweModel, KgweObject, ObjectMeta
from kgwe.policy.budget import CURRENCY_PATTERN
from kgwe.policy.types import LabelMap, Money


class GPUPrice(KgweModel):
    product: str = Field(min_length=1)  # GFD nvidia.com/gpu.product value
    on_demand_per_hour: Money
    spot_per_hour: Money | None = None


class PricingCatalogSpec(KgweModel):
    currency: str = Field(default="USD", pattern=CURRENCY_PATTERN)
    gpus: list[GPUPrice] = Field(min_length=1)
    mig_pricing: Literal["ComputeSlices", "MemorySlices", "Max"] = "ComputeSlices"
    idle_cost: Literal["Separate", "ShareByAllocation"] = "Separate"
    spot_node_selector: LabelMap = Field(default_factory=dict)  # nodes priced at spotPerHour

    def price_for(self, product: str) -> GPUPrice | None:
        """Exact product match first, then case-insensitive (GFD spellings vary in case)."""
        for price in self.gpus:
            if price.product == product:
                return price
        for price in self.gpus:
            if price.product.lower() == product.lower():
                return price
        return None

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
