"""Layouts come from the placement rules and reproduce docs/facts/mig.md §3's counts."""

from __future__ import annotations

from collections import Counter

import pytest

from kgwe.errors import KgweError
from kgwe.gpu import catalog
from kgwe.gpu.layouts import (
    Instance,
    check_layout,
    describe,
    enumerate_layouts,
    feasible_multisets,
    fit,
    idle_slices,
    is_valid,
    primary_profiles,
)

H100 = catalog.model_by_key("H100-80GB")
A30 = catalog.model_by_key("A30-24GB")

# docs/facts/mig.md §3, the 19 maximal layouts, with (profile class, start) on the memory axis
REFERENCE_19 = """
7g@0 | 4g@0 3g@4 | 4g@0 2g@4 1g@6 | 4g@0 1g@4 1g@5 1g@6 | 3g@0 3g@4 | 3g@0 2g@4 1g@6 | 3g@0 1g@4 1g@5 1g@6
| 2g@0 2g@2 3g@4 | 2g@0 1g@2 1g@3 3g@4 | 1g@0 1g@1 2g@2 3g@4 | 1g@0 1g@1 1g@2 1g@3 3g@4 | 2g@0 2g@2 2g@4 1g@6
| 2g@0 2g@2 1g@4 1g@5 1g@6 | 2g@0 1g@2 1g@3 2g@4 1g@6 | 2g@0 1g@2 1g@3 1g@4 1g@5 1g@6
| 1g@0 1g@1 2g@2 2g@4 1g@6 | 1g@0 1g@1 2g@2 1g@4 1g@5 1g@6 | 1g@0 1g@1 1g@2 1g@3 2g@4 1g@6
| 1g@0 1g@1 1g@2 1g@3 1g@4 1g@5 1g@6
"""
H100_NAMES = {"1g": "1g.10gb", "2g": "2g.20gb", "3g": "3g.40gb", "4g": "4g.40gb", "7g": "7g.80gb"}


def _reference_layouts(names):
    out = set()
    for text in REFERENCE_19.replace("\n", " ").split("|"):
        inst = []
        for token in text.split():
            cls, start = token.split("@")
            inst.append((names[cls], int(start)))
        out.add(tuple(sorted(inst)))
    return out


def _as_set(layouts):
    return {tuple(sorted(lay)) for lay in layouts}


def test_primary_profiles_exclude_the_double_memory_1g():
    assert [p.name for p in primary_profiles(H100)] == ["7g.80gb", "4g.40gb", "3g.40gb", "2g.20gb", "1g.10gb"]
    assert [p.name for p in primary_profiles(catalog.model_by_key("A100-40GB"))] == [
        "7g.40gb",
        "4g.20gb",
        "3g.20gb",
        "2g.10gb",
        "1g.5gb",
    ]


@pytest.mark.parametrize("key", ["H100-80GB", "A100-40GB", "B200-180GB"])
def test_the_19_maximal_layouts(key):
    model = catalog.model_by_key(key)
    names = {p.name.split(".")[0]: p.name for p in primary_profiles(model)}
    got = enumerate_layouts(model)
    assert len(got) == 19
    assert _as_set(got) == _reference_layouts(names)


def test_layout_counts_of_the_reference():
    assert (len(feasible_multisets(H100)), len(feasible_multisets(H100, maximal=True))) == (37, 12)
    every = [p.name for p in H100.base_profiles]
    assert len(enumerate_layouts(H100, every)) == 78
    assert len(feasible_multisets(H100, every)) == 77
    assert len(feasible_multisets(H100, every, maximal=True)) == 28
    maximal = {tuple(sorted(Counter(dict(ms)).elements())) for ms in feasible_multisets(H100, maximal=True)}
    assert ("2g.20gb", "3g.40gb", "4g.40gb") not in maximal  # over 7 compute slices
    assert ("3g.40gb", "3g.40gb") in maximal and ("1g.10gb",) * 7 in maximal


def test_a30_has_five_maximal_layouts():
    got = {describe(lay) for lay in enumerate_layouts(A30)}
    assert got == {
        "1g.6gb@0 1g.6gb@1 1g.6gb@2 1g.6gb@3",
        "1g.6gb@0 1g.6gb@1 2g.12gb@2",
        "2g.12gb@0 1g.6gb@2 1g.6gb@3",
        "2g.12gb@0 2g.12gb@2",
        "4g.24gb@0",
    }


def test_zero_waste_layouts():
    zero = [lay for lay in enumerate_layouts(H100) if idle_slices(H100, lay) == (0, 0)]
    assert len(zero) == 6  # 5 multisets; 2g+2×1g+3g has two placements
    assert len({tuple(sorted(i.profile for i in lay)) for lay in zero}) == 5
    assert all(Instance("3g.40gb", 4) in lay or lay == (Instance("7g.80gb", 0),) for lay in zero)


def test_fit_says_where():
    got = fit(H100, ["1g.10gb", "1g.10gb", "3g.40gb", "2g.20gb"])
    assert got is not None and is_valid(H100, got)
    assert Counter(i.profile for i in got) == Counter({"1g.10gb": 2, "3g.40gb": 1, "2g.20gb": 1})
    assert fit(H100, ["4g.40gb", "3g.40gb"]) == (Instance("4g.40gb", 0), Instance("3g.40gb", 4))
    assert fit(H100, ["4g.40gb", "2g.20gb", "2g.20gb"]) is None  # 8 compute slices
    assert fit(H100, ["1g.20gb"] * 4) is not None and fit(H100, ["1g.20gb"] * 4 + ["1g.10gb"]) is None
    assert fit(H100, ["1g.10gb"] * 8) is None


def test_fit_respects_fixed_instances():
    # 3g@0 leaves 4..7; a second 3g fits at 4 but not next to a 1g sitting at 4
    assert fit(H100, ["3g.40gb"], fixed=[("3g.40gb", 0)]) == (Instance("3g.40gb", 0), Instance("3g.40gb", 4))
    assert fit(H100, ["3g.40gb"], fixed=[("1g.10gb", 4)]) == (Instance("3g.40gb", 0), Instance("1g.10gb", 4))
    assert fit(H100, ["3g.40gb", "3g.40gb"], fixed=[("1g.10gb", 4)]) is None
    # order of creation matters in the driver (9,19,14,19 works, 19,19,14,9 does not); fit searches all orders
    assert fit(H100, ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]) is not None


def test_check_layout_errors():
    with pytest.raises(KgweError, match="cannot start at memory slice 7"):
        check_layout(H100, [("1g.10gb", 7)])
    with pytest.raises(KgweError, match="overlaps"):
        check_layout(H100, [("3g.40gb", 0), ("2g.20gb", 2)])
    with pytest.raises(KgweError, match="valid: \\[0, 2, 4\\]"):
        check_layout(H100, [("4g.40gb", 0), ("2g.20gb", 4), ("2g.20gb", 6)])
    with pytest.raises(KgweError, match="does not support MIG"):
        check_layout(catalog.model_by_key("T4"), [])
    with pytest.raises(KgweError, match="at most 1"):
        check_layout(H100, [("1g.10gb+me", 0), ("1g.10gb+me", 1)])
