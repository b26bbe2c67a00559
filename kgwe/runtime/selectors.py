"""Label and field selectors as the API server reads them, for the in-memory cluster (kgwe.runtime.memory).

Labels: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, comma-separated, all must hold.
Fields: `path=value`, `path==value`, `path!=value` on a dotted path (`metadata.name`, `spec.nodeName`,
`status.phase`, `involvedObject.name`); a missing field reads as "".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Match = Callable[[Mapping[str, Any]], bool]

_SET_TERM = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _terms(selector: str) -> list[str]:
    """Split on the commas outside parentheses."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return [t.strip() for t in terms if t.strip()]


def _label_term(term: str) -> Callable[[Mapping[str, str]], bool]:
    found = _SET_TERM.match(term)
    if found:
        key, op, values = found.group(1), found.group(2), {v.strip() for v in found.group(3).split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    for op in ("!=", "==", "="):
        if op in term:
            key, _, value = (part.strip() for part in term.partition(op))
            if op == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    if term.startswith("!"):
        key = term[1:].strip()
        return lambda labels: key not in labels
    return lambda labels: term in labels


def label_match(selector: str | None) -> Match:
    """Whether an object's labels satisfy `selector` (None or "": every object)."""
    tests = [_label_term(t) for t in _terms(selector or "")]
    return lambda obj: all(t((obj.get("metadata") or {}).get("labels") or {}) for t in tests)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _field_term(term: str) -> Match:
    for op in ("!=", "==", "="):
        if op in term:
            path, _, value = (part.strip() for part in term.partition(op))
            if op == "!=":
                return lambda obj: field_value(obj, path) != value
            return lambda obj: field_value(obj, path) == value
    raise ValueError(f"field selector term {term!r} has no operator")


def field_match(selector: str | None) -> Match:
    """Whether an object satisfies the field selector (None or "": every object)."""
    tests = [_field_term(t) for t in _terms(selector or "")]
    return lambda obj: all(t(obj) for t in tests)
