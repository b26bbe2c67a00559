"""Rounding money so that cents are conserved.

Rounding every line to the cent independently loses or invents cents; instead the total is rounded
once, every line gets its floor, and the leftover cents go to the lines with the largest remainders
(Hamilton / largest-remainder apportionment). Each line ends within one cent of its exact value.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
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


def apportion_nested(exact: Mapping[K, Fraction], path: Callable[[K], tuple[Hashable, ...]]) -> dict[K, int]:
    """Cents for every cell, rounded once at the top of a hierarchy and reconciled below it.

    `path(cell)` names the groups a cell belongs to, outermost first (e.g. its team, then its namespace).
    Each outermost group's total is its exact total rounded once (`round_cents`); each inner group and
    each cell gets its share of its parent's cents by largest remainder, so every rollup along the
    hierarchy is the sum of its cells and every figure is within a cent of its exact value."""
    tops: dict[Hashable, dict[K, Fraction]] = {}
    for cell, value in exact.items():
        tops.setdefault(path(cell)[0], {})[cell] = Fraction(value)
    out: dict[K, int] = {}
    for members in tops.values():
        _apportion_level(members, path, 1, round_cents(sum(members.values(), Fraction(0))), out)
    return out


def _apportion_level(
    cells: Mapping[K, Fraction],
    path: Callable[[K], tuple[Hashable, ...]],
    depth: int,
    total_cents: int,
    out: dict[K, int],
) -> None:
    """`total_cents` over the cells' groups at `depth` (a cell whose path ends above it stands alone)."""
    groups: dict[tuple[bool, Hashable], dict[K, Fraction]] = {}
    for cell, value in cells.items():
        trail = path(cell)
        key: tuple[bool, Hashable] = (True, trail[depth]) if depth < len(trail) else (False, cell)
        groups.setdefault(key, {})[cell] = value
    sums = {key: sum(members.values(), Fraction(0)) for key, members in groups.items()}
    for key, cents in largest_remainder(sums, total_cents).items():
        is_group, _ = key
        if is_group:
            _apportion_level(groups[key], path, depth + 1, cents, out)
        else:
            (cell,) = groups[key]
            out[cell] = cents
