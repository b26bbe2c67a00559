"""Diagnostics: one finding about the repository, pinned to file:line:column and a field path."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

Severity = Literal["error", "warning"]
Path = tuple[str | int, ...]


def format_path(path: Iterable[str | int]) -> str:
    """('spec', 'gpus', 0, 'product') -> 'spec.gpus[0].product'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


@dataclass(frozen=True, order=True)
class Diagnostic:
    file: str
    line: int
    column: int
    severity: Severity
    path: str
    message: str
    kind: str = ""
    name: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        obj = (
            f" {self.kind}/{self.name}" if self.kind and self.name else (f" {self.kind}" if self.kind else "")
        )
        field = f" {self.path}:" if self.path else ""
        return f"{where}: {self.severity}:{obj}{field} {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """' (did you mean "x"?)' when a candidate is close, else ''."""
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    if not match:
        lowered = {c.lower(): c for c in candidates}
        if word.lower() in lowered:
            match = [lowered[word.lower()]]
    return f' (did you mean "{match[0]}"?)' if match else ""


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold directly (through Optional/Annotated)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _children(annotation: object, part: str | int) -> list[object]:
    """Annotations reached from `annotation` by one loc step."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _children(typing.get_args(annotation)[0], part)
    if origin in (typing.Union, types.UnionType):
        return [c for arg in typing.get_args(annotation) for c in _children(arg, part)]
    if origin in (list, tuple) and isinstance(part, int):
        return [typing.get_args(annotation)[0]]
    if origin is dict:
        return [typing.get_args(annotation)[1]]
    out: list[object] = []
    for model in _models_in(annotation):
        for fname, field in model.model_fields.items():
            if part in (field.alias, fname):
                out.append(field.annotation)
    return out


def allowed_fields(model: type[BaseModel], loc: Path) -> list[str]:
    """YAML field names valid at `loc` (the parent of an unknown field)."""
    current: list[Any] = [model]
    for part in loc:
        current = [c for a in current for c in _children(a, part)]
    names: list[str] = []
    for a in current:
        for m in _models_in(a):
            names.extend(f.alias or n for n, f in m.model_fields.items())
    return names


def _expected_literals(ctx: dict[str, Any]) -> list[str]:
    text = str(ctx.get("expected", ""))
    return [p.strip().strip("'") for p in text.replace(" or ", ", ").split(",") if p.strip()]


def messages_from_validation(model: type[BaseModel], exc: ValidationError) -> list[tuple[Path, str]]:
    """(loc, human message) for every error of a pydantic ValidationError, with 'did you mean'."""
    out: list[tuple[Path, str]] = []
    for err in exc.errors(include_url=False):
        loc: Path = tuple(err["loc"])
        typ = err["type"]
        value = err.get("input")
        if typ == "extra_forbidden":
            field = str(loc[-1])
            hint = did_you_mean(field, allowed_fields(model, loc[:-1]))
            msg = f'unknown field "{field}"{hint}'
        elif typ == "missing":
            msg = f'required field "{loc[-1]}" is missing'
        elif typ == "literal_error":
            expected = _expected_literals(err.get("ctx", {}))
            hint = did_you_mean(str(value), expected) if isinstance(value, str) else ""
            msg = f"{value!r} is not one of {', '.join(expected)}{hint}"
        elif typ == "value_error":
            cause = (err.get("ctx") or {}).get("error")
            findings = getattr(cause, "findings", None)  # TemplateErrors: one message per inner field
            if findings:
                out.extend(((*loc, *path), message) for path, message in findings)
                continue
            msg = err["msg"].removeprefix("Value error, ")
        elif typ == "string_pattern_mismatch":
            msg = f"{value!r} does not match the required pattern {err.get('ctx', {}).get('pattern')}"
        else:
            shown = repr(value)
            if len(shown) > 60:
                shown = shown[:57] + "..."
            msg = f"{err['msg']} (got {shown})" if not isinstance(value, dict) else err["msg"]
        out.append((loc, msg))
    return out
