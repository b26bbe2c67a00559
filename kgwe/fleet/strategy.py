"""`kgwe strategy NAME` as a text edit: change `spec.strategy` of a ScoringProfile in its YAML file and keep
everything else byte for byte (comments, key order, flow maps). Pure: text and positions in, text out.

In a GitOps tool a runtime strategy switch is a commit: the command edits the checkout and shows the diff;
the user commits and the controller rolls it out."""

from __future__ import annotations

import difflib
import re

from kgwe.errors import KgweError

_VALUE = re.compile(r"""strategy(?P<gap>\s*:\s*)(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s,}#]+)""")


def replace_strategy(text: str, line: int, column: int, strategy: str) -> str:
    """`text` with the value of the `strategy` key at 1-based (line, column) set to `strategy`."""
    lines = text.splitlines(keepends=True)
    if not 1 <= line <= len(lines):
        raise KgweError(f"line {line} is outside the file")
    current = lines[line - 1]
    match = _VALUE.match(current, column - 1)
    if match is None:
        raise KgweError(f"line {line}: cannot read the strategy value here; change it by hand")
    lines[line - 1] = current[: match.start("value")] + strategy + current[match.end("value") :]
    return "".join(lines)


def insert_strategy(text: str, spec_line: int, child_column: int, strategy: str) -> str:
    """`text` with `strategy: NAME` added as the first key of the block map `spec:` at `spec_line`, indented
    to `child_column` (1-based, the column of spec's other keys). A flow map (`spec: {...}`) is refused."""
    lines = text.splitlines(keepends=True)
    if not 1 <= spec_line <= len(lines):
        raise KgweError(f"line {spec_line} is outside the file")
    rest = lines[spec_line - 1].split(":", 1)[1] if ":" in lines[spec_line - 1] else ""
    if rest.split("#", 1)[0].strip():
        raise KgweError(f"line {spec_line}: spec is written inline; add `strategy: {strategy}` to it by hand")
    newline = "\r\n" if lines[spec_line - 1].endswith("\r\n") else "\n"
    if not lines[spec_line - 1].endswith(("\n", "\r")):
        lines[spec_line - 1] += newline
    lines.insert(spec_line, " " * (child_column - 1) + f"strategy: {strategy}{newline}")
    return "".join(lines)


def unified_diff(before: str, after: str, path: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
        )
    )
