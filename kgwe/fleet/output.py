"""Render rows as kubectl does: `table` (aligned columns, upper-case headers), `wide` (more columns),
`json` and `yaml` (every field of every row, for scripts). Pure: rows in, text out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from kgwe.safetext import terminal_cell
from kgwe.timestamps import format_rfc3339

FORMATS = ("table", "wide", "json", "yaml")
NONE = "<none>"  # kubectl's word for an empty cell


@dataclass(frozen=True)
class Column:
    """One table column: its header and the row key it shows; `wide` columns only with `-o wide`."""

    header: str
    key: str
    wide: bool = False


def cell(value: object) -> str:
    """The text of one table cell: one line, its control characters written as visible escapes (a name, a
    team or a message may hold ESC, BEL or CR; kgwe.safetext)."""
    if value is None or value == "" or value == []:
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return terminal_cell(",".join(str(v) for v in value))
    return terminal_cell(value)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], *, wide: bool = False) -> str:
    """Aligned columns separated by three spaces (kubectl's look); the last column is not padded."""
    shown = [c for c in columns if wide or not c.wide]
    grid = [[c.header for c in shown]] + [[cell(row.get(c.key)) for c in shown] for row in rows]
    widths = [max(len(line[i]) for line in grid) for i in range(len(shown))]
    out = []
    for line in grid:
        padded = [text.ljust(widths[i]) for i, text in enumerate(line[:-1])] + [line[-1]]
        out.append("   ".join(padded).rstrip())
    return "\n".join(out) + "\n"


def to_json(data: object) -> str:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2, default=_plain).decode() + "\n"


def to_yaml(data: object) -> str:
    import yaml

    return yaml.safe_dump(orjson.loads(to_json(data)), sort_keys=False, allow_unicode=True)


def _plain(value: object) -> str:
    if isinstance(value, datetime):
        return format_rfc3339(value)
    return str(value)


def render(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], output: str, *, kind: str = "List"
) -> str:
    """Rows in the chosen format; json/yaml wrap them as {"kind": kind, "items": rows}."""
    if output in ("json", "yaml"):
        doc = {"kind": kind, "items": [dict(r) for r in rows]}
        return to_json(doc) if output == "json" else to_yaml(doc)
    if not rows:
        return ""
    return table(rows, columns, wide=output == "wide")


def age(since: datetime | None, now: datetime) -> str | None:
    """kubectl's short age: 42s, 5m, 3h, 2d (None when unknown)."""
    if since is None:
        return None
    seconds = max(0, int((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
