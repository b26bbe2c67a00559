"""GPU product names as GPU Feature Discovery writes them, and the one rule for finding a product's price.

GFD's `nvidia.com/gpu.product` varies by driver and settings: the case of the name differs between
releases, the MIG `single` strategy appends `-MIG-<profile>` and time-slicing appends `-SHARED`. A price
written for the physical GPU must apply to all of them, and `kgwe validate`'s "no price" warning must
agree with the chargeback, so both look prices up here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")

# GFD appends these to nvidia.com/gpu.product: "-MIG-1g.10gb" (single strategy), "-SHARED" (time-slicing).
_PRODUCT_SUFFIX = re.compile(r"(-MIG-[0-9a-z.+]+|-SHARED)+$", re.IGNORECASE)


def base_product(product: str) -> str:
    """The physical GPU product behind a GFD product label value."""
    return _PRODUCT_SUFFIX.sub("", product.strip())


def find_price(prices: Mapping[str, T], product: str) -> T | None:
    """The entry of `prices` (keyed by product as written in the PricingCatalog) for a node's product:
    the exact name first, then ignoring case, then the same for the physical product without GFD's
    `-MIG-…`/`-SHARED` suffix."""
    for name in dict.fromkeys((product, base_product(product))):
        if name in prices:
            return prices[name]
        lower = name.lower()
        for key, value in prices.items():
            if key.lower() == lower:
                return value
    return None
