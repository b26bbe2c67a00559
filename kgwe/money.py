"""Money as written in policy and reports: exact decimals, never binary floats.

One parser for every price KGWE reads (PricingCatalog, budgets, `kgwe report` inputs). A YAML float such as
`4.1` has already been rounded in binary before KGWE sees it, so it is refused with a hint to quote it.
Standard library only, so the pure core may import it.
"""

from __future__ import annotations

import re
from decimal import Decimal

MONEY_PATTERN = r"^[0-9]+(\.[0-9]+)?$"  # what the JSON Schemas tell editors
_MONEY = re.compile(r"^\d+(?:\.\d+)?$")


def parse_money(value: object) -> Decimal:
    """A non-negative amount: a quoted decimal string ("4.10"), an int or a Decimal; else ValueError."""
    if isinstance(value, Decimal):
        if not value.is_finite() or value < 0:
            raise ValueError(f"expected a finite non-negative amount, got {value!r}")
        return value
    if isinstance(value, bool):
        raise ValueError(f'expected an amount like "4.10", got {value!r}')
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a non-negative amount, got {value!r}")
        return Decimal(value)
    if isinstance(value, float):
        raise ValueError(f'write money as a quoted string (e.g. "{value}"), not a bare number {value!r}')
    if isinstance(value, str) and _MONEY.match(value.strip()):
        return Decimal(value.strip())
    raise ValueError(f'expected a non-negative amount like "4.10", got {value!r}')
