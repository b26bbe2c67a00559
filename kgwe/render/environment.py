"""The Jinja2 environment for templates/: StrictUndefined, and values only through YAML-safe filters.

`yaml` emits one scalar or flow collection that YAML parses back to exactly the input value (plain when
that is unambiguous, JSON-quoted otherwise). `yaml_block` emits multi-line text as a literal block.
Templates never paste raw strings, so a label value like `yes`, `1e3` or `a: b` cannot change meaning.
"""

from __future__ import annotations

import functools
import json
import re

import jinja2
import yaml

from kgwe import vocab
from kgwe.resources import templates_dir

_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE
_PLAIN = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./+-]*$")
# libyaml's safe loader and dumper where PyYAML was built with it (several times faster), else PyYAML's own
FAST_SAFE_LOADER = yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader
FAST_SAFE_DUMPER = yaml.CSafeDumper if hasattr(yaml, "CSafeDumper") else yaml.SafeDumper


def _quoted(text: str) -> str:
    """A double-quoted YAML scalar; PyYAML's emitter escapes whatever YAML cannot hold literally."""
    out = yaml.dump(text, Dumper=FAST_SAFE_DUMPER, default_style='"', width=1 << 30, allow_unicode=True)
    # a document end marker may follow the scalar on its own line; the scalar itself may end in "..."
    return out.removesuffix("\n...\n").removesuffix("\n")


@functools.lru_cache(maxsize=65536)
def _string_scalar(text: str) -> str:
    if _PLAIN.match(text):
        try:
            if yaml.load(text, Loader=FAST_SAFE_LOADER) == text:
                return text
        except yaml.YAMLError:  # "...", say: a document end marker, not a scalar
            pass
    return _quoted(text)


def _float_special(value: float) -> str:
    if value != value:
        return ".nan"
    return ".inf" if value > 0 else "-.inf"


def to_yaml(value: object) -> str:
    """A YAML flow rendering of `value` that parses back to the same value."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises UndefinedError naming the missing variable
    if isinstance(value, str):
        return _string_scalar(value)
    if value is None or isinstance(value, bool | int):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else _float_special(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(to_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{to_yaml(str(k))}: {to_yaml(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot render {type(value).__name__} into YAML")


def to_yaml_block(text: str, indent: int) -> str:
    """`|`/`|-` literal block indented by `indent`; a quoted string when a block could not hold it."""
    if not isinstance(text, str):
        raise TypeError("yaml_block needs text")
    lines = text.split("\n")
    body = lines[:-1] if text.endswith("\n") else lines
    unsafe = (
        not text
        or text.endswith("\n\n")
        or text[0] in " \t\n"
        or _NON_PRINTABLE.search(text) is not None
        or any(ch in text for ch in "\r\x85\u2028\u2029\ufeff")
        or any(line != line.rstrip(" \t") for line in body)
    )
    if unsafe:
        return _quoted(text)
    indicator = "|" if text.endswith("\n") else "|-"
    pad = " " * indent
    return indicator + "\n" + "\n".join(pad + line if line else "" for line in body)


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
        lstrip_blocks=False,
    )
    env.filters["yaml"] = to_yaml
    env.filters["yaml_block"] = to_yaml_block
    env.globals["vocab"] = vocab  # names on the cluster: `{{ vocab.BUDGET_QUOTA_NAME | yaml }}`
    return env


def render_template(template: str, /, **context: object) -> str:
    text = environment().get_template(template).render(**context)
    return text.lstrip("\n").rstrip("\n") + "\n"
