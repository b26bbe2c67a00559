"""Random YAML never crashes the bounded loader nor makes it hold much memory, and what it accepts is what
PyYAML itself would have built.

The texts mix YAML's structural characters, every line break libyaml honours, quotes, escapes, anchors and
aliases with long runs of openers, so nesting, alias graphs and scanner corner cases are all reached. Time
is not asserted here (bench/yaml_bounds.py prints the worst cases); memory is, with tracemalloc."""

from __future__ import annotations

import tracemalloc

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgwe.policy.yaml_source import MAX_DEPTH, YamlBudget, YamlSyntaxError, parse_documents

PIECES = [
    "[", "]", "{", "}", ",", ":", ": ", "- ", "? ", "#", "&a ", "&b ", "*a", "*b", "<<: ", "!!str ", "!x ",
    "'", '"', '\\"', "''", "|\n", ">\n", "---\n", "...\n", "%YAML 1.1\n", "\n", "\r", "\r\n", "\x85",
    "\u2028", "\u2029", "\t", " ", "  ", "a", "b: ", "1", "~", "yes", ".nan", "0x1F", "2016-01-01", "é",
    "2016-13-45", "!!int ", "!!float ", "!!timestamp ", "!!binary ", "!!set ", "!!omap ", "9" * 5000,
]  # fmt: skip
pieces = st.sampled_from(PIECES)
runs = st.tuples(st.sampled_from(["[", "{", "- ", "a:\n ", "[a, ", "{a: "]), st.integers(1, 3_000)).map(
    lambda run: run[0] * run[1]
)
texts = st.lists(pieces | runs, max_size=60).map("".join)

MAX_PEAK_BYTES = 64 * 1024 * 1024
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the parser the bounded loader reads events from


def depth_of(data: object) -> int:
    """Nesting levels of built data, counted without recursion."""
    deepest, stack = 0, [(data, 1)]
    seen: set[int] = set()
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list) and id(item) not in seen:
            seen.add(id(item))
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_random_yaml_is_read_or_refused_cleanly_within_bounded_memory(text: str) -> None:
    tracemalloc.start()
    try:
        docs = parse_documents(text, YamlBudget())
    except YamlSyntaxError as exc:
        assert exc.line >= 1 and exc.column >= 1 and str(exc)
        docs = None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < MAX_PEAK_BYTES, f"peak {peak} bytes"
    if docs is None:
        return
    assert all(depth_of(d.data) <= MAX_DEPTH for d in docs)
    # what is accepted is exactly what PyYAML builds from the same parser (safe within these bounds)
    built = [d.data for d in docs if d.data is not None]
    assert repr(built) == repr([d for d in yaml.load_all(text, Loader=LOADER) if d is not None])


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2_000))
def test_random_bytes_are_read_or_refused_cleanly(data: bytes) -> None:
    try:
        parse_documents(data)
    except YamlSyntaxError as exc:
        assert exc.line >= 1 and exc.column >= 1
