"""Rounding money so that cents are conserved.

Rounding every line to the cent independently loses or invents cents; instead the total is rounded
once, every line gets its floor, and the leftover cents go to the lines with the largest remainders
(Hamilton / largest-remainder apportionment). Each line ends within one cent of its exact value.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from decimal import Decimal
from fractions import Fraction
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

CENT = Decimal("0.01")


def round_cents(value: Fraction) -> int:
    """Exact value in currency units -> whole cents, half to even (the one rounding step), in integers."""
    scaled = Fraction(value) * 100
    quotient, remainder = divmod(scaled.numerator, scaled.denominator)
    twice = 2 * remainder
    if twice > scaled.denominator or (twice == scaled.denominator and quotient % 2 == 1):
        quotient += 1
    return quotient


def largest_remainder(exact: Mapping[K, Fraction], total_cents: int | None = None) -> dict[K, int]:
    """Apportion cents to keys so they sum to total_cents (default: the rounded exact sum).

    Ties on the remainder go to the key that sorts first (by repr), so results are deterministic.
    """
    if total_cents is None:
        total_cents = round_cents(sum(exact.values(), Fraction(0)))
    floors: dict[K, int] = {}
    remainders: dict[K, float] = {}
    for k, v in exact.items():
        v = Fraction(v)
        whole, rest = divmod(v.numerator * 100, v.denominator)  # integer floor: exact
        floors[k] = whole
        remainders[k] = rest / v.denominator  # only orders who gets a leftover cent
    leftover = total_cents - sum(floors.values())
    if not exact:
        if total_cents != 0:
            raise ValueError("cannot apportion a non-zero total over no lines")
        return {}
    order = sorted(exact, key=lambda k: (-remainders[k], repr(k)))
    if leftover < 0 or leftover > len(order):
        # Only possible when the caller's total is far from the exact sum; spread it evenly then.
        step, extra = divmod(leftover, len(order))
        return {k: floors[k] + step + (1 if i < extra else 0) for i, k in enumerate(order)}
    return {k: floors[k] + (1 if i < leftover else 0) for i, k in enumerate(order)}


def cents_to_decimal(cents: int) -> Decimal:
    return (Decimal(cents) * CENT).quantize(CENT)


def quantized(value: Fraction, places: str) -> Decimal:
    """An exact fraction as a Decimal rounded to `places` (e.g. "0.001"), for figures that are not money."""
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal(places))
