"""The loader's fast paths agree with the obvious slow ones."""

from __future__ import annotations

import yaml
from hypothesis import given
from hypothesis import strategies as st

from kgwe.policy.checks import _compatible_pairs
from kgwe.policy.yaml_source import parse_documents

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
documents = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.lists(documents, min_size=1, max_size=3), st.booleans())
def test_fast_builder_equals_pyyaml(docs, flow):
    text = yaml.safe_dump_all(docs, default_flow_style=flow)
    assert [d.data for d in parse_documents(text)] == list(yaml.safe_load_all(text))


def test_anchors_merge_keys_and_timestamps_fall_back_to_pyyaml():
    text = "a: &x {b: 1}\nc:\n  <<: *x\n  d: 2016-01-01\ne: [yes, No, ~, 0x1F, 1_000]\n"
    (doc,) = parse_documents(text)
    assert doc.data == yaml.safe_load(text)
    assert doc.where(("c", "d")) == (4, 3)


selectors = st.lists(
    st.dictionaries(st.sampled_from("abc"), st.sampled_from("xy"), max_size=3), min_size=0, max_size=12
)


@given(selectors)
def test_compatible_pairs_equal_brute_force(sels):
    brute = [
        (i, j)
        for j in range(len(sels))
        for i in range(j)
        if all(sels[j][k] == v for k, v in sels[i].items() if k in sels[j])
    ]
    assert _compatible_pairs(sels) == brute


def test_alias_bombs_are_refused_quickly(tmp_path):
    from kgwe.policy import load_repository

    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    ps = load_repository(tmp_path)
    assert "aliases expand to more than" in ps.errors[0].message
