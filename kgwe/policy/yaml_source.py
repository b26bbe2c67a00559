"""The one bounded YAML loader: every YAML text KGWE did not write itself is read through it (policy files,
GPUWorkload manifests, the inventory snapshot `kgwe plan` reads from a pull request, files handed to the
CLI, configuration read back from the cluster).

Documents come with the line:column of every field, so a pydantic error can point at its source; duplicate
keys, which PyYAML silently resolves to the last one, are reported instead.

Whoever writes the text may be hostile, so every step is bounded before it can cost much:
- size: the text is refused above `max_bytes` before any parser sees it;
- depth: nodes are composed here, iteratively, from the parser's event stream (libyaml's when present), so
  nesting is counted exactly as the parser sees it, whatever the line breaks and quoting, and refused at the
  first level past MAX_DEPTH. PyYAML's own composer and libyaml's document loader recurse once per level
  (libyaml up to 0.2.5 crashes the process near depth 50,000);
- size of the data: nodes composed per file, fields built per file and per repository, and fields built by
  reading aliases are capped, so an alias bomb ("billion laughs") is refused after a bounded amount of work
  and memory; an alias may not point into the node that holds it (no recursive data), and nesting built
  through aliases is bounded like written nesting.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import SafeConstructor
from yaml.error import Mark
from yaml.resolver import Resolver

from kgwe.policy.diagnostics import Path

try:
    _Parser: type[yaml.CSafeLoader] | type[yaml.SafeLoader] = (
        yaml.CSafeLoader
    )  # libyaml's parser: several times faster on large repositories
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Parser = yaml.SafeLoader

MAX_TEXT_BYTES = 1024 * 1024  # one YAML text (a policy file, a manifest, a snapshot)


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
    def __init__(self, message: str, mark: Mark) -> None:
        super().__init__(message)
        self.line = mark.line + 1
        self.column = mark.column + 1


class _BadValue(Exception):
    """A scalar its tag cannot make a value of (a 13th month, `!!int x`, an integer of 5,000 digits)."""

    def __init__(self, exc: Exception, mark: Mark) -> None:
        super().__init__(f"cannot read this value: {exc}")
        self.line = mark.line + 1
        self.column = mark.column + 1


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

    def visit(self, node: yaml.Node, path: Path) -> None:
        if len(path) >= MAX_DEPTH and not isinstance(node, yaml.ScalarNode):
            raise _TooLarge(f"nesting deeper than {MAX_DEPTH} levels (through YAML aliases)", node.start_mark)
        self.fields += 1
        self.budget.fields_left -= 1
        if id(node) in self._seen:  # the composed graph shares a node only through an alias
            self.alias_uses += 1
            if self.alias_uses > MAX_ALIAS_FIELDS:
                raise _TooLarge(
                    f"aliases expand to more than {MAX_ALIAS_FIELDS} fields in one file", node.start_mark
                )
        else:
            self._seen.add(id(node))
        if self.fields > MAX_FIELDS:
            message = f"more than {MAX_FIELDS} fields in one file (through YAML aliases?)"
            raise _TooLarge(message, node.start_mark)
        if self.budget.exhausted:
            raise _TooLarge(f"the repository holds more than {MAX_REPOSITORY_FIELDS} fields", node.start_mark)


class _SlowPath(Exception):
    """A node the fast builder does not handle (merge keys, timestamps, custom tags...)."""


def _build(node: yaml.Node, path: Path, doc: YamlDocument, loader: _Composer, walk: _Walk) -> object:
    """Plain data for `node`, recording the line:column of every field on the way (one pass).

    Handles the tags policy files use; anything else raises _SlowPath and the document is constructed
    by PyYAML instead (positions are still recorded)."""
    walk.visit(node, path)
    tag = node.tag
    if isinstance(node, yaml.ScalarNode):
        if tag == _STR:
            return node.value
        try:
            if tag == _INT:
                return loader.construct_yaml_int(node)
            if tag == _FLOAT:
                return loader.construct_yaml_float(node)
        except Exception as exc:  # `!!int` of nothing, an integer of 5,000 digits
            raise _BadValue(exc, node.start_mark) from None
        if tag == _BOOL:
            return node.value.lower() in _TRUE
        if tag == _NULL:
            return None
        raise _SlowPath
    if isinstance(node, yaml.MappingNode):
        if tag != _MAP:
            raise _SlowPath
        out: dict[object, Any] = {}
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
    walk.visit(node, path)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            mark = key_node.start_mark
            key = (
                key_node.value
                if isinstance(key_node, yaml.ScalarNode)
                else f"<{key_node.id} key at {mark.line + 1}:{mark.column + 1}>"
            )
            child = (*path, key)
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


class _Composer(SafeConstructor, Resolver):
    """Nodes from the parser's events, without recursion, counting nesting and nodes as they come; also
    PyYAML's safe constructor for the documents the fast builder leaves to it."""

    def __init__(self) -> None:
        SafeConstructor.__init__(self)
        Resolver.__init__(self)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> object:
        """PyYAML's, with a value error turned into one naming the node's line and column."""
        try:
            return super().construct_object(node, deep)
        except (_BadValue, _TooLarge, yaml.YAMLError):
            raise
        except Exception as exc:  # PyYAML's constructors fail in many ways on values their tag does not fit
            raise _BadValue(exc, node.start_mark) from None

    def documents(self, events: Iterator[Any]) -> Iterator[yaml.Node | None]:
        """The root node of each document (None for an empty one); _TooLarge at the first limit crossed,
        yaml.ComposerError for an alias without its anchor or an anchor defined twice."""
        open_nodes: list[Any] = []  # the collections being composed, outermost first
        open_ids: set[int] = set()
        anchors: dict[str, yaml.Node] = {}
        root: yaml.Node | None = None
        nodes = 0
        for event in events:
            kind = type(event)
            node: yaml.Node | None
            if kind is yaml.ScalarEvent:
                tag = event.tag
                if tag is None or tag == "!":
                    tag = self.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
                node = yaml.ScalarNode(tag, event.value, event.start_mark, event.start_mark, event.style)
            elif kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
                if len(open_nodes) >= MAX_DEPTH:
                    raise _TooLarge(f"nesting deeper than {MAX_DEPTH} levels", event.start_mark)
                node_class = yaml.SequenceNode if kind is yaml.SequenceStartEvent else yaml.MappingNode
                tag = event.tag
                if tag is None or tag == "!":
                    tag = self.resolve(node_class, None, event.implicit)  # type: ignore[no-untyped-call]
                node = node_class(tag, [], event.start_mark, event.start_mark, event.flow_style)
            elif kind is yaml.AliasEvent:
                node = anchors.get(event.anchor)
                if node is None:
                    raise ComposerError(
                        None, None, f"found undefined alias {event.anchor!r}", event.start_mark
                    )
                if id(node) in open_ids:
                    raise _TooLarge("an alias inside the node it names (recursive data)", event.start_mark)
            elif kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
                done = open_nodes.pop()
                open_ids.discard(id(done))
                if isinstance(done, yaml.MappingNode):  # keys and values were appended in turn
                    flat = done.value
                    done.value = list(zip(flat[0::2], flat[1::2], strict=True))
                continue
            elif kind is yaml.DocumentStartEvent:
                anchors, root, nodes = {}, None, 0
                continue
            elif kind is yaml.DocumentEndEvent:
                yield root
                continue
            else:  # stream start and end
                continue
            if kind is not yaml.AliasEvent:
                nodes += 1
                if nodes > MAX_FIELDS:
                    raise _TooLarge(f"more than {MAX_FIELDS} fields in one file", event.start_mark)
                anchor = event.anchor
                if anchor is not None:
                    if anchor in anchors:
                        raise ComposerError(
                            "found duplicate anchor",
                            anchors[anchor].start_mark,
                            "second occurrence",
                            event.start_mark,
                        )
                    anchors[anchor] = node
            if open_nodes:
                open_nodes[-1].value.append(node)
            else:
                root = node
            if kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
                open_nodes.append(node)
                open_ids.add(id(node))


def _events(text: str) -> Iterator[Any]:
    parser = _Parser(text)
    try:
        while parser.check_event():
            yield parser.get_event()
    finally:
        parser.dispose()


def _text_of(text: str | bytes, max_bytes: int) -> str:
    """The text, once its size is known to be within `max_bytes`; YamlSyntaxError otherwise."""
    size = len(text) if isinstance(text, bytes) or len(text) * 4 <= max_bytes else len(text.encode())
    if size > max_bytes:
        raise YamlSyntaxError(f"{size} bytes of YAML; at most {max_bytes} are read", 1, 1)
    if isinstance(text, str):
        return text
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = text.count(b"\n", 0, exc.start) + 1
        column = exc.start - (text.rfind(b"\n", 0, exc.start) + 1) + 1
        raise YamlSyntaxError(
            f"file is not UTF-8 (byte 0x{text[exc.start]:02x} at offset {exc.start})", line, column
        ) from None


def parse_documents(
    text: str | bytes, budget: YamlBudget | None = None, *, max_bytes: int = MAX_TEXT_BYTES
) -> list[YamlDocument]:
    """Every document of a YAML stream; YamlSyntaxError (with line:column) on the first syntax error or
    the first limit crossed (size, depth, fields, aliases; `budget` is shared by the files of one
    repository).

    Documents before the error are lost on purpose: a file with a syntax error is reported as a whole."""
    text = _text_of(text, max_bytes)
    walk = _Walk(budget if budget is not None else YamlBudget())
    composer = _Composer()
    docs: list[YamlDocument] = []
    try:
        for node in composer.documents(_events(text)):
            if node is None:
                continue
            doc = YamlDocument(data=None, line=node.start_mark.line + 1, column=node.start_mark.column + 1)
            before = walk.start_document()
            try:
                doc.data = _build(node, (), doc, composer, walk)
            except _SlowPath:
                doc.positions.clear()
                doc.duplicate_keys.clear()
                walk.restart_document(before)
                _index(node, (), doc, walk)  # bounded before PyYAML constructs anything
                doc.data = composer.construct_document(node)
            docs.append(doc)
    except (_TooLarge, _BadValue) as exc:
        raise YamlSyntaxError(str(exc), exc.line, exc.column) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        parts = [p for p in (exc.context, exc.problem) if p]
        message = "YAML syntax error: " + ", ".join(parts)
        if "maximum nesting depth" in (exc.problem or ""):  # libyaml >= 0.2.6 stops at 1,000 levels itself
            message = f"nesting deeper than {MAX_DEPTH} levels"
        raise YamlSyntaxError(
            message, (mark.line + 1) if mark else 1, (mark.column + 1) if mark else 1
        ) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"YAML error: {exc}", 1, 1) from None
    return docs


def load_all(text: str | bytes, *, max_bytes: int = MAX_TEXT_BYTES) -> list[object]:
    """Plain data of every non-empty document (what yaml.safe_load_all gives), read within the bounds."""
    return [doc.data for doc in parse_documents(text, max_bytes=max_bytes)]


def load_one(text: str | bytes, *, max_bytes: int = MAX_TEXT_BYTES) -> object:
    """Plain data of the single document of `text` (None when empty), read within the bounds."""
    docs = parse_documents(text, max_bytes=max_bytes)
    if len(docs) > 1:
        raise YamlSyntaxError("expected a single YAML document, found several", docs[1].line, docs[1].column)
    return docs[0].data if docs else None
