"""YAML documents with the line:column of every field, so a pydantic error can point at its source.

PyYAML's compose step keeps a mark per node; we index them by field path while constructing plain data.
Duplicate keys, which PyYAML silently resolves to the last one, are reported instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from kgwe.policy.diagnostics import Path

try:
    _Loader = yaml.CSafeLoader  # libyaml: several times faster on large repositories
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader  # type: ignore[misc]


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


# A 1 MiB file holds well under a million fields; more can only come from aliases ("billion laughs").
MAX_FIELDS = 1_000_000


class _TooLarge(Exception):
    pass


class _SlowPath(Exception):
    """A node the fast builder does not handle (merge keys, timestamps, custom tags...)."""


def _build(node: yaml.Node, path: Path, doc: YamlDocument, loader: yaml.BaseLoader) -> object:
    """Plain data for `node`, recording the line:column of every field on the way (one pass).

    Handles the tags policy files use; anything else raises _SlowPath and the document is constructed
    by PyYAML instead (positions are still recorded)."""
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
            key = _build(key_node, path, doc, loader)
            child = (*path, str(key))
            mark = key_node.start_mark
            if key in out:
                doc.duplicate_keys.append((child, mark.line + 1, mark.column + 1))
            positions[child] = (mark.line + 1, mark.column + 1)
            if len(positions) > MAX_FIELDS:
                raise _TooLarge
            out[key] = _build(value_node, child, doc, loader)
        return out
    if isinstance(node, yaml.SequenceNode):
        if tag != _SEQ:
            raise _SlowPath
        items = []
        for i, item in enumerate(node.value):
            child = (*path, i)
            doc.positions[child] = (item.start_mark.line + 1, item.start_mark.column + 1)
            if len(doc.positions) > MAX_FIELDS:
                raise _TooLarge
            items.append(_build(item, child, doc, loader))
        return items
    raise _SlowPath


def _index(node: yaml.Node, path: Path, doc: YamlDocument) -> None:
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
            if len(doc.positions) > MAX_FIELDS:
                raise _TooLarge
            _index(value_node, child, doc)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = (*path, i)
            doc.positions[child] = (item.start_mark.line + 1, item.start_mark.column + 1)
            if len(doc.positions) > MAX_FIELDS:
                raise _TooLarge
            _index(item, child, doc)


def parse_documents(text: str) -> list[YamlDocument]:
    """Every document of a YAML stream; YamlSyntaxError (with line:column) on the first syntax error.

    Documents before the error are lost on purpose: a file with a syntax error is reported as a whole."""
    loader = _Loader(text)
    docs: list[YamlDocument] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            doc = YamlDocument(data=None, line=node.start_mark.line + 1, column=node.start_mark.column + 1)
            try:
                doc.data = _build(node, (), doc, loader)
            except _SlowPath:
                doc.positions.clear()
                doc.duplicate_keys.clear()
                doc.data = loader.construct_document(node)
                _index(node, (), doc)
            docs.append(doc)
    except _TooLarge:
        raise YamlSyntaxError(
            f"a document expands to more than {MAX_FIELDS} fields (through YAML aliases?)", 1, 1
        ) from None
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
