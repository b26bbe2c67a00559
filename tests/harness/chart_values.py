"""The chart's README of values, written from values.yaml's comments and checked against values.schema.json,
so the list cannot drift: `make deploy` writes deploy/helm/kgwe/README.md, a test fails while it is stale.

A value is a key of values.yaml. It is documented by the comment lines right above it (and a comment after
it on the same line). A key with documented keys inside it is a section, listed through them; any other key
is listed whole with its default (`resources`, `nodeSelector`, `tolerations` ...).
`undocumented` and `not_in_schema` say what breaks those rules.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_]*):(?P<rest>.*)$")
_COMMENT = re.compile(r"^ *# ?(?P<text>.*)$")


@dataclass(frozen=True)
class Value:
    path: str  # dotted: migController.costs.enabled
    default: Any
    description: str


def _inline_comment(rest: str) -> str:
    """The comment after a value on its line (`key: 1   # why`), outside quotes."""
    quote = None
    for i, ch in enumerate(rest):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1] == " "):
            return rest[i + 1 :].strip()
    return ""


def _lookup(doc: Any, path: list[str]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def values(values_file: Path) -> list[Value]:
    """Every documented value of values.yaml, in file order."""
    text = values_file.read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    lines = text.splitlines()
    keys = []  # (line index, indent, key, rest, comment above)
    above: list[str] = []
    for i, line in enumerate(lines):
        if (m := _COMMENT.match(line)) is not None:
            above.append(m.group("text").strip())
            continue
        if (m := _KEY.match(line)) is not None:
            keys.append((i, len(m.group("indent")), m.group("key"), m.group("rest"), " ".join(above)))
        above = []
    out: list[Value] = []
    sections: list[tuple[int, str]] = []  # the sections the current key is in
    whole_below: int | None = None  # indent of a value listed whole: its children are not listed
    for n, (_, indent, key, rest, comment) in enumerate(keys):
        if whole_below is not None:
            if indent > whole_below:
                continue
            whole_below = None
        while sections and sections[-1][0] >= indent:
            sections.pop()
        path = [k for _, k in sections] + [key]
        child = keys[n + 1] if n + 1 < len(keys) else None
        has_children = child is not None and child[1] > indent and not rest.strip()
        inside = []
        for later in keys[n + 1 :]:
            if later[1] <= indent:
                break
            inside.append(later)
        if has_children and any(k[4] for k in inside):  # documented keys inside: a section
            sections.append((indent, key))
            continue
        description = " ".join(p for p in (comment, _inline_comment(rest)) if p)
        out.append(Value(".".join(path), _lookup(doc, path), description))
        if has_children:
            whole_below = indent
    return out


def undocumented(listed: list[Value]) -> list[str]:
    return [v.path for v in listed if not v.description]


def schema_paths(schema: dict) -> set[str]:
    """Every property path the schema names (through $ref into $defs)."""
    defs = schema.get("$defs", {})

    def walk(node: dict, prefix: str) -> set[str]:
        if "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        out = set()
        for key, sub in (node.get("properties") or {}).items():
            path = f"{prefix}{key}"
            out.add(path)
            out |= walk(sub, path + ".")
        return out

    return walk(schema, "")


def not_in_schema(listed: list[Value], schema: dict) -> list[str]:
    known = schema_paths(schema)
    return [v.path for v in listed if v.path not in known]


def uncovered(listed: list[Value], schema: dict) -> list[str]:
    """Top-level and section schema properties that no listed value covers (itself, a parent or a child)."""
    paths = [v.path for v in listed]
    missing = []
    for path in sorted(schema_paths(schema)):
        covered = any(p == path or path.startswith(p + ".") or p.startswith(path + ".") for p in paths)
        if not covered:
            missing.append(path)
    return missing


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default_text(value: Any) -> str:
    return "`" + _cell(json.dumps(value, separators=(", ", ": "))) + "`"


def readme(chart_dir: Path) -> str:
    """deploy/helm/kgwe/README.md."""
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text(encoding="utf-8"))
    listed = values(chart_dir / "values.yaml")
    rows = [f"| `{v.path}` | {_default_text(v.default)} | {_cell(v.description)} |" for v in listed]
    return "\n".join(
        [
            f"# The {chart['name']} Helm chart",
            "",
            f"{chart['description'].strip()}",
            "",
            "```sh",
            "helm install kgwe deploy/helm/kgwe --namespace kgwe-system --create-namespace \\",
            "  --set scheduler.enabled=true --set migController.enabled=true --wait",
            "```",
            "",
            "Everything else (certificates, the scheduler's starting configuration) the chart and KGWE's",
            "controller make themselves; the repository's README says what to do next. `values.schema.json`",
            "refuses unknown keys and wrong types.",
            "",
            "## Values",
            "",
            "Written from the comments of `values.yaml` by `make deploy`; edit those, not this table.",
            "",
            "| Value | Default | Meaning |",
            "|---|---|---|",
            *rows,
            "",
        ]
    )
