"""Field types shared by the kinds: percentages, Go-style durations, money, Kubernetes names.

Each type keeps the YAML spelling users write ("70%", "5m", "4.10") and parses it into an exact value
(Decimal, timedelta) at load time, so downstream code never re-parses strings. Serialization gives the
YAML spelling back, and the JSON Schema says what an editor should accept.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$")
_MONEY = re.compile(r"^\d+(?:\.\d+)?$")
_UNIT_SECONDS = {"ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}

PERCENT_PATTERN = r"^[0-9]+(\.[0-9]+)?%$"
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
MONEY_PATTERN = r"^[0-9]+(\.[0-9]+)?$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _plain(d: Decimal) -> str:
    """Decimal without exponent or trailing zeros: 70 -> '70', 12.50 -> '12.5'."""
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def parse_percent(value: Any) -> Decimal:
    """'70%' -> Decimal('70'). Only the string form: a bare number is ambiguous (0.7? 70?)."""
    if isinstance(value, str):
        m = _PERCENT.match(value)
        if m:
            return Decimal(m.group(1))
    raise ValueError(f"expected a percentage like '70%', got {value!r}")


def format_percent(value: Decimal) -> str:
    return _plain(value) + "%"


def parse_duration(value: Any) -> timedelta:
    """Go/Kubernetes duration strings: '5m', '2s', '1h30m', '500ms'."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str) and _DURATION.match(value.strip()):
        seconds = sum(Decimal(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(value.strip()))
        return timedelta(seconds=float(seconds))
    raise ValueError(f"expected a duration like '30s', '5m' or '1h30m', got {value!r}")


def format_duration(value: timedelta) -> str:
    """Shortest Go-style spelling: 300 s -> '5m', 5400 s -> '1h30m', 0.5 s -> '500ms'."""
    ms = round(value.total_seconds() * 1000)
    if ms == 0:
        return "0s"
    if ms % 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    out = ""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out += f"{seconds // size}{unit}"
            seconds %= size
    return out


def parse_money(value: Any) -> Decimal:
    """Money as a quoted decimal string ('4.10') or an integer; floats are refused because YAML would
    already have rounded them in binary."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool):
        raise ValueError(f'expected an amount like "4.10", got {value!r}')
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        raise ValueError(f'write money as a quoted string (e.g. "{value}"), not a bare number {value!r}')
    if isinstance(value, str) and _MONEY.match(value.strip()):
        try:
            return Decimal(value.strip())
        except InvalidOperation:  # pragma: no cover - the regex already guarantees a decimal
            pass
    raise ValueError(f'expected a non-negative amount like "4.10", got {value!r}')


Percent = Annotated[
    Decimal,
    PlainValidator(parse_percent),
    PlainSerializer(format_percent, return_type=str),
    WithJsonSchema({"type": "string", "pattern": PERCENT_PATTERN}),
]
Duration = Annotated[
    timedelta,
    PlainValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN}),
]
Money = Annotated[
    Decimal,
    PlainValidator(parse_money),
    PlainSerializer(lambda d: _plain(d) if d == d.to_integral_value() else format(d, "f"), return_type=str),
    WithJsonSchema({"type": "string", "pattern": MONEY_PATTERN}),
]


def parse_int_or_percent(value: Any) -> int | Decimal:
    """Kubernetes IntOrString as used by maxUnavailable: 2 -> 2, '10%' -> Decimal('10')."""
    if isinstance(value, bool):
        raise ValueError(f"expected an integer or a percentage like '10%', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must be >= 0, got {value}")
        return value
    try:
        return parse_percent(value)
    except ValueError:
        raise ValueError(f"expected an integer or a percentage like '10%', got {value!r}") from None


IntOrPercent = Annotated[
    int | Decimal,
    PlainValidator(parse_int_or_percent),
    PlainSerializer(lambda v: v if isinstance(v, int) else format_percent(v)),
    WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": PERCENT_PATTERN}]}
    ),
]


def _label_value(value: Any) -> str:
    if value is None:
        return ""  # `key:` with nothing after it is an empty label value
    if isinstance(value, bool):
        return "true" if value else "false"  # GFD spells booleans in lower case
    if isinstance(value, int | float | str):
        return str(value)
    raise ValueError(f"a label value must be a string, got {type(value).__name__} {value!r}")


def _parse_label_map(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"expected a map of label key to value, got {type(value).__name__}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise ValueError(f"label key {k!r} must be a string")
        out[k] = _label_value(v)
    return out


LabelMap = Annotated[
    dict[str, str],
    PlainValidator(_parse_label_map),
    WithJsonSchema({"type": "object", "additionalProperties": {"type": ["string", "boolean", "number"]}}),
]
