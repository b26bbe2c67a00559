"""Field types shared by the kinds: percentages, Go-style durations, money, Kubernetes names.

Each type keeps the YAML spelling users write ("70%", "5m", "4.10") and parses it into an exact value
(Decimal, timedelta) at load time, so downstream code never re-parses strings. Serialization gives the
YAML spelling back, and the JSON Schema says what an editor should accept.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Annotated

from pydantic import PlainSerializer, PlainValidator, StringConstraints, WithJsonSchema

from kgwe.money import MONEY_PATTERN, parse_money

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$")
_UNIT_SECONDS = {"ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}

PERCENT_PATTERN = r"^[0-9]+(\.[0-9]+)?%$"
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A non-empty Kubernetes label value: what a team or a GPU product may be. Both become label values
# (kgwe.nvidia.io/team, GFD's nvidia.com/gpu.product) and land in reports, tables and terminals, so neither
# may hold a control character, a separator or a formula sign.
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
LABEL_VALUE_MAX_LENGTH = 63

# Git remotes a PolicyRepository may name: https://, ssh:// and scp-like user@host:path. Never a local path,
# file://, ext:: or anything starting with "-" (git would read it as an option, e.g. --upload-pack=<cmd>),
# and no password in the URL (credentials belong in a Secret). The same pattern goes into the CRD, so the
# API server refuses what the controller would refuse. Written for Python, Rust (pydantic) and Go (RE2).
_GIT_USER = r"[A-Za-z0-9_][A-Za-z0-9._~-]*"
_GIT_HOST = r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?"
GIT_URL_PATTERN = (
    rf"^(https://({_GIT_USER}@)?{_GIT_HOST}(:[0-9]{{1,5}})?(/[^\s]*)?"
    rf"|ssh://({_GIT_USER}@)?{_GIT_HOST}(:[0-9]{{1,5}})?/[^\s]*"
    rf"|{_GIT_USER}@{_GIT_HOST}:[^\s-][^\s]*)$"
)
GIT_URL_MAX_LENGTH = 2048
# Branch and tag names: what `git check-ref-format` allows minus the risky corners (a leading "-" is an
# option to git; "..", "@{" and the like are revision syntax).
GIT_REF_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._/+-]*$"
GIT_COMMIT_PATTERN = r"^[0-9a-f]{7,40}$"


def _plain(d: Decimal) -> str:
    """Decimal without exponent or trailing zeros: 70 -> '70', 12.50 -> '12.5'."""
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def parse_percent(value: object) -> Decimal:
    """'70%' -> Decimal('70'). Only the string form: a bare number is ambiguous (0.7? 70?)."""
    if isinstance(value, str):
        m = _PERCENT.match(value)
        if m:
            return Decimal(m.group(1))
    raise ValueError(f"expected a percentage like '70%', got {value!r}")


def format_percent(value: Decimal) -> str:
    return _plain(value) + "%"


def parse_duration(value: object) -> timedelta:
    """Go/Kubernetes duration strings: '5m', '2s', '1h30m', '500ms'."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str) and _DURATION.match(value.strip()):
        seconds = sum(Decimal(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(value.strip()))
        return timedelta(seconds=float(seconds))
    raise ValueError(f"expected a duration like '30s', '5m' or '1h30m', got {value!r}")


def parse_positive_duration(value: object) -> timedelta:
    """A duration that must be longer than zero (intervals, timeouts): '0s' would mean "busy loop"."""
    parsed = parse_duration(value)
    if parsed <= timedelta(0):
        raise ValueError(f"must be longer than 0s, got {value!r}")
    return parsed


def parse_git_url(value: object) -> str:
    """A remote URL as GIT_URL_PATTERN allows it, or ValueError saying what is allowed."""
    if (
        isinstance(value, str)
        and len(value) <= GIT_URL_MAX_LENGTH
        and re.fullmatch(GIT_URL_PATTERN, value, flags=re.ASCII)
    ):
        return value
    shown = value if not isinstance(value, str) or len(value) <= 80 else value[:80] + "..."
    raise ValueError(
        f"{shown!r} is not an allowed Git URL: use https://host/path, ssh://[user@]host/path or "
        "user@host:path (no local paths, file://, ext::, leading '-' or password in the URL; put "
        "credentials in the Secret named by secretRef)"
    )


def parse_git_ref_name(value: object) -> str:
    """A branch or tag name git cannot mistake for an option or a revision expression."""
    if (
        isinstance(value, str)
        and re.fullmatch(GIT_REF_NAME_PATTERN, value)
        and ".." not in value
        and "//" not in value
        and not value.endswith(("/", ".", ".lock"))
        and len(value) <= 255
    ):
        return value
    raise ValueError(f"{value!r} is not a valid branch or tag name")


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
PositiveDuration = Annotated[
    timedelta,
    PlainValidator(parse_positive_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN}),
]
GitUrl = Annotated[
    str,
    PlainValidator(parse_git_url),
    WithJsonSchema({"type": "string", "pattern": GIT_URL_PATTERN, "maxLength": GIT_URL_MAX_LENGTH}),
]
GitRefName = Annotated[
    str,
    PlainValidator(parse_git_ref_name),
    WithJsonSchema({"type": "string", "pattern": GIT_REF_NAME_PATTERN, "maxLength": 255}),
]
Money = Annotated[
    Decimal,
    PlainValidator(parse_money),
    PlainSerializer(lambda d: _plain(d) if d == d.to_integral_value() else format(d, "f"), return_type=str),
    WithJsonSchema({"type": "string", "pattern": MONEY_PATTERN}),
]


def parse_int_or_percent(value: object) -> int | Decimal:
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


LabelValue = Annotated[
    str, StringConstraints(pattern=LABEL_VALUE_PATTERN, min_length=1, max_length=LABEL_VALUE_MAX_LENGTH)
]


def _label_value(value: object) -> str:
    if value is None:
        return ""  # `key:` with nothing after it is an empty label value
    if isinstance(value, bool):
        return "true" if value else "false"  # GFD spells booleans in lower case
    if isinstance(value, int | float | str):
        return str(value)
    raise ValueError(f"a label value must be a string, got {type(value).__name__} {value!r}")


def _parse_label_map(value: object) -> dict[str, str]:
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
