"""build_mig_configs: mig-parted v1 entries, content-derived names, dedup across nodes."""

from __future__ import annotations

import pytest

from kgwe.errors import KgweError
from kgwe.planner.migparted import build_mig_configs

SEVEN = ["1g.10gb"] * 7
BALANCED = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]


def test_uniform_nodes_get_readable_shared_names():
    configs, nodes = build_mig_configs({"b": [SEVEN] * 8, "a": [SEVEN] * 8, "c": [None] * 4, "d": [[], []]})
    assert nodes == {
        "a": "kgwe-all-7x1g.10gb",
        "b": "kgwe-all-7x1g.10gb",
        "c": "kgwe-all-disabled",
        "d": "kgwe-all-enabled",
    }
    seven = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    assert configs["kgwe-all-7x1g.10gb"] == seven
    assert configs["kgwe-all-disabled"] == [{"devices": "all", "mig-enabled": False, "mig-devices": {}}]
    assert configs["kgwe-all-enabled"] == [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    assert list(configs) == sorted(configs)


def test_mixed_node_gets_per_index_entries_and_hash_name():
    layout = [SEVEN, BALANCED, SEVEN, None, list(reversed(BALANCED))]
    configs, nodes = build_mig_configs({"n1": layout, "n2": list(layout)})
    assert nodes["n1"] == nodes["n2"] and nodes["n1"].startswith("kgwe-")
    assert configs[nodes["n1"]] == [
        {"devices": [0, 2], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [1, 4], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
        {"devices": [3], "mig-enabled": False, "mig-devices": {}},
    ]
    _, nodes2 = build_mig_configs({"n3": [SEVEN, BALANCED, BALANCED, None, BALANCED]})
    assert nodes2["n3"] != nodes["n1"]


def test_names_are_valid_label_values_and_stable():
    many = [["1g.10gb+me", "1g.20gb", "1g.20gb", "2g.20gb"]] * 8
    configs, nodes = build_mig_configs({"x": many})
    name = nodes["x"]
    assert len(name) <= 63 and "+" not in name
    assert build_mig_configs({"x": many}) == (configs, nodes)


def test_bad_input_is_a_clear_error():
    with pytest.raises(KgweError, match=r"node n GPU 1.*'7g'"):
        build_mig_configs({"n": [SEVEN, ["7g"]]})
    with pytest.raises(KgweError, match="must be a list"):
        build_mig_configs({"n": ["1g.10gb"]})


def test_nodes_without_gpus_are_skipped():
    assert build_mig_configs({"cpu": []}) == ({}, {})
