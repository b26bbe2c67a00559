"""YAML documents with the line:column of every field, so a pydantic error can point at its source.

PyYAML's compose step keeps a mark per node; we index them by field path while constructing plain data.
Duplicate keys, which PyYAML silently resolves to the last one, are reported instead.

Policy files come from whoever can commit to the policy repository, so parsing is bounded: nesting depth
is checked by scanning the text before libyaml sees it (libyaml recurses per level and crashes the process
around depth 50,000; Python code raises RecursionError near 1,000), and the fields built from a file, the
alias expansions in it and the fields of a whole repository are capped while building, so an alias bomb
("billion laughs") is refused after a bounded amount of work and memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from kgwe.policy.diagnostics import Path

try:
    _Loader: Any = yaml.CSafeLoader  # libyaml: several times faster on large repositories
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader


@dataclass
class YamlDocument:
    data: object
    line: int  # 1-based line of the document start
    column: int
    positions: dict[Path, tuple[int, int]] = field(default_factory=dict)
    duplicate_keys: list[tuple[Path, int, int]] = field(default_factory=list)

    def where(self, path: Path) -> tuple[int, int]:
        """1-based (line, column) of the deepest known prefix of `path`."""
        for end in range(len(path), 0, -1):
            pos = self.positions.get(tuple(path[:end]))
            if pos is not None:
                return pos
        return (self.line, self.column)


class YamlSyntaxError(Exception):
    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_TRUE = frozenset({"true", "yes", "on"})


MAX_DEPTH = 64  # nesting levels of a policy file (real ones use about 8)
MAX_FIELDS = 300_000  # fields built from one file (a 1 MiB file of short lines holds about 250,000)
MAX_ALIAS_FIELDS = 100_000  # fields one file may build by reading aliases (policy files rarely use any)
MAX_REPOSITORY_FIELDS = 2_000_000  # fields built from all files of one repository


@dataclass
class YamlBudget:
    """Fields left for a whole repository: one budget shared by every file of a load."""

    fields_left: int = MAX_REPOSITORY_FIELDS

    @property
    def exhausted(self) -> bool:
        return self.fields_left <= 0


class _TooLarge(Exception):
    def __init__(self, message: str, node: yaml.Node) -> None:
        super().__init__(message)
        self.line = node.start_mark.line + 1
        self.column = node.start_mark.column + 1


class _Walk:
    """Counts what building one file costs; raises _TooLarge at the first cap it crosses."""

    def __init__(self, budget: YamlBudget) -> None:
        self.budget = budget
        self.fields = 0
        self.alias_uses = 0
        self._seen: set[int] = set()

    def start_document(self) -> tuple[int, int, int]:
        """A new document (aliases never cross documents); returns what restart_document needs."""
        self._seen = set()
        return self.fields, self.alias_uses, self.budget.fields_left

    def restart_document(self, before: tuple[int, int, int]) -> None:
        """Forget a partial walk of the current document (it is walked again another way)."""
        self.fields, self.alias_uses, self.budget.fields_left = before
        self._seen = set()

    def visit(self, node: yaml.Node) -> None:
        self.fields += 1
        self.budget.fields_left -= 1
        if id(node) in self._seen:  # the composed graph shares a node only through an alias
            self.alias_uses += 1
            if self.alias_uses > MAX_ALIAS_FIELDS:
                raise _TooLarge(f"aliases expand to more than {MAX_ALIAS_FIELDS} fields in one file", node)
        else:
            self._seen.add(id(node))
        if self.fields > MAX_FIELDS:
            raise _TooLarge(f"more than {MAX_FIELDS} fields in one file (through YAML aliases?)", node)
        if self.budget.exhausted:
            raise _TooLarge(f"the repository holds more than {MAX_REPOSITORY_FIELDS} fields", node)


_FLOW_OPEN, _FLOW_CLOSE = "[{", "]}"
_FLOW_CHARS = re.compile(r"[\[\]{}\"'#]")


def nesting_too_deep(text: str, limit: int = MAX_DEPTH) -> tuple[int, int] | None:
    """(line, column) where the text nests deeper than `limit`, else None; a cheap over-estimate from the
    raw text (indentation levels, compact "- - -" entries, flow brackets), run before any YAML parser."""
    indents = [-1]
    flow = 0
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip(" ")
        if not stripped or (flow == 0 and stripped.startswith("#")):
            continue
        column = len(line) - len(stripped)
        if flow == 0:
            while len(indents) > 1 and indents[-1] > column:
                indents.pop()
            if column > indents[-1]:
                indents.append(column)
        compact, rest = 0, stripped
        while (rest[:2] in ("- ", "? ") or rest in ("-", "?")) and compact + len(indents) <= limit + 1:
            compact += 1
            rest = rest[2:].lstrip(" ")
        block = len(indents) - 1 + compact
        if block > limit:
            return number, column + 1
        if flow == 0 and "[" not in line and "{" not in line:
            continue
        quote = ""
        for match in _FLOW_CHARS.finditer(line):
            index, char = match.start(), match.group()
            if quote:
                if char == quote:
                    quote = ""
            elif char in "\"'" and (index == 0 or line[index - 1] in " \t[{,:"):
                quote = char
            elif char == "#" and (index == 0 or line[index - 1] in " \t"):
                break
            elif char in _FLOW_OPEN:
                flow += 1
                if block + flow > limit:
                    return number, index + 1
            elif char in _FLOW_CLOSE:
                flow = max(0, flow - 1)
    return None


class _SlowPath(Exception):
    """A node the fast builder does not handle (merge keys, timestamps, custom tags...)."""


def _build(node: yaml.Node, path: Path, doc: YamlDocument, loader: Any, walk: _Walk) -> object:
    """Plain data for `node`, recording the line:column of every field on the way (one pass).

    Handles the tags policy files use; anything else raises _SlowPath and the document is constructed
    by PyYAML instead (positions are still recorded)."""
    walk.visit(node)
    tag = node.tag
    if isinstance(node, yaml.ScalarNode):
        if tag == _STR:
            return node.value
        if tag == _INT:
            return loader.construct_yaml_int(node)
        if tag == _FLOAT:
            return loader.construct_yaml_float(node)
        if tag == _BOOL:
            return node.value.lower() in _TRUE
        if tag == _NULL:
            return None
        raise _SlowPath
    if isinstance(node, yaml.MappingNode):
        if tag != _MAP:
            raise _SlowPath
        out: dict = {}
        positions = doc.positions
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                raise _SlowPath
            key = _build(key_node, path, doc, loader, walk)
            child = (*path, str(key))
            mark = key_node.start_mark
            if key in out:
                doc.duplicate_keys.append((child, mark.line + 1, mark.column + 1))
            positions[child] = (mark.line + 1, mark.column + 1)
            out[key] = _build(value_node, child, doc, loader, walk)
        return out
    if isinstance(node, yaml.SequenceNode):
        if tag != _SEQ:
            raise _SlowPath
        items = []
        for i, item in enumerate(node.value):
            child = (*path, i)
            doc.positions[child] = (item.start_mark.line + 1, item.start_mark.column + 1)
            items.append(_build(item, child, doc, loader, walk))
        return items
    raise _SlowPath


def _index(node: yaml.Node, path: Path, doc: YamlDocument, walk: _Walk) -> None:
    walk.visit(node)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            child = (*path, key)
            mark = key_node.start_mark
            if key in seen:
                doc.duplicate_keys.append((child, mark.line + 1, mark.column + 1))
            seen.add(key)
            doc.positions[child] = (mark.line + 1, mark.column + 1)
            _index(value_node, child, doc, walk)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = (*path, i)
            doc.positions[child] = (item.start_mark.line + 1, item.start_mark.column + 1)
            _index(item, child, doc, walk)


def parse_documents(text: str, budget: YamlBudget | None = None) -> list[YamlDocument]:
    """Every document of a YAML stream; YamlSyntaxError (with line:column) on the first syntax error or
    the first limit crossed (depth, fields, aliases; `budget` is shared by the files of one repository).

    Documents before the error are lost on purpose: a file with a syntax error is reported as a whole."""
    deep = nesting_too_deep(text)
    if deep is not None:
        raise YamlSyntaxError(f"nesting deeper than {MAX_DEPTH} levels", *deep)
    walk = _Walk(budget if budget is not None else YamlBudget())
    loader = _Loader(text)
    docs: list[YamlDocument] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            doc = YamlDocument(data=None, line=node.start_mark.line + 1, column=node.start_mark.column + 1)
            before = walk.start_document()
            try:
                doc.data = _build(node, (), doc, loader, walk)
            except _SlowPath:
                doc.positions.clear()
                doc.duplicate_keys.clear()
                walk.restart_document(before)
                _index(node, (), doc, walk)  # bounded before PyYAML constructs anything
                doc.data = loader.construct_document(node)
            docs.append(doc)
    except _TooLarge as exc:
        raise YamlSyntaxError(str(exc), exc.line, exc.column) from None
    except RecursionError:  # not reachable within MAX_DEPTH; a clear error rather than a crash if it is
        raise YamlSyntaxError(f"nesting deeper than {MAX_DEPTH} levels", 1, 1) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        parts = [p for p in (exc.context, exc.problem) if p]
        message = "YAML syntax error: " + ", ".join(parts)
        raise YamlSyntaxError(
            message, (mark.line + 1) if mark else 1, (mark.column + 1) if mark else 1
        ) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"YAML error: {exc}", 1, 1) from None
    finally:
        loader.dispose()
    return docs
