"""Kubernetes resource quantities ("500m", "16Gi", "1e9", "1Pi"): the one parser every KGWE part reads them
with (the extender's pod requests, pod template validation, metering, budget quotas, node capacity).

It accepts exactly the spellings the API server does (apimachinery's resource.ParseQuantity, as a JSON
string or number, surrounding spaces trimmed): an optional sign, digits with an optional decimal point,
then one suffix — binary Ki Mi Gi Ti Pi Ei, decimal n u m k M G T P E, or an exponent e/E with a signed
integer. The value is exact (a Decimal), as kubernetes.utils.parse_quantity computes it; unlike that
function it refuses what the API server refuses (`K`, `1_000`, `NaN`, `1 Gi`), and it bounds the work a
hostile pod can ask for: the text's length and the exponent. Standard library only, so the pure core may
import it.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, localcontext
from functools import lru_cache

MAX_CHARS = 128  # far longer than any quantity a person writes (the API server sets no limit)
MAX_EXPONENT = 1000  # |decimal exponent|: beyond any resource amount, and cheap to compute exactly
_GRAMMAR = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?$"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}  # powers of two
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}  # powers of ten
EXAMPLES = "e.g. 500m, 2, 16Gi, 1e9"


def parse_quantity(value: object) -> Decimal:
    """The exact amount of a quantity (a string as the API server takes it, or a JSON number); ValueError
    with what is wrong otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"expected a quantity ({EXAMPLES}), got {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"expected a quantity ({EXAMPLES}), got {value!r}")
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise ValueError(f"expected a quantity ({EXAMPLES}), got {type(value).__name__}")
    if len(value) > MAX_CHARS:
        raise ValueError(f"a quantity of more than {MAX_CHARS} characters")
    return _parse_text(value)


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    """A quantity's text -> its amount. Cached: the extender reads the same few spellings in every request
    (a Decimal is immutable; a refused text raises and is not kept; the size bounds what a flood of new
    texts can hold)."""
    m = _GRAMMAR.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a quantity ({EXAMPLES})")
    number = m.group("number")
    if m.group("binary"):
        scale, power = Decimal(2) ** _BINARY[m.group("binary")], 0
    else:
        scale = Decimal(1)
        power = _DECIMAL[m.group("decimal")] if m.group("decimal") else int(m.group("exponent") or 0)
    if abs(power) > MAX_EXPONENT:
        raise ValueError(f"{value!r}: exponent beyond ±{MAX_EXPONENT}")
    digits = len(number)
    try:
        with localcontext() as ctx:  # exact: enough precision for every digit written and the scale
            ctx.prec = digits + 40
            return (Decimal(number) * scale).scaleb(power)
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a quantity ({EXAMPLES})") from None


def is_quantity(value: object) -> bool:
    try:
        parse_quantity(value)
    except ValueError:
        return False
    return True


def whole(value: object) -> int:
    """A count of an extended resource (nvidia.com/gpu, ...): the API server takes only whole, non-negative
    numbers there, in any spelling ("2", "2e0", "2000m"); ValueError otherwise."""
    amount = parse_quantity(value)
    if amount < 0 or amount != amount.to_integral_value():
        raise ValueError(f"expected a whole number, got {value!r}")
    return int(amount)


def milli(value: object) -> int:
    """Thousandths (CPU cores -> millicores), rounded up as the API server's MilliValue() does."""
    amount = parse_quantity(value) * 1000
    return int(amount.to_integral_value(rounding="ROUND_CEILING"))


def in_units(value: object, unit: int) -> int:
    """How many whole `unit`s the quantity holds, rounded down (bytes -> MiB with unit 2**20)."""
    return int((parse_quantity(value) / unit).to_integral_value(rounding="ROUND_FLOOR"))


def count(value: object, default: int = 0) -> int:
    """A whole-number count as the API server or a label gives it (any quantity spelling), or `default` when
    it is absent or not one (a count KGWE cannot read counts as none)."""
    if value is None:
        return default
    try:
        return whole(value)
    except ValueError:
        return default
