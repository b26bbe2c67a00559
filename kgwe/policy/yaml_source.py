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
            _index(value_node, child, doc)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = (*path, i)
            doc.positions[child] = (item.start_mark.line + 1, item.start_mark.column + 1)
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
            data = loader.construct_document(node)
            doc = YamlDocument(data=data, line=node.start_mark.line + 1, column=node.start_mark.column + 1)
            _index(node, (), doc)
            docs.append(doc)
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
