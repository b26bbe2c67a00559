"""The MIG manager stand-in's config check: mig-parted semantics, geometry from the catalog."""

from __future__ import annotations

import pytest

from kgwe.gpu import catalog
from kgwe.localcluster.migmanager import InvalidMigConfig, plan_layout

H100 = catalog.model_by_key("H100-80GB")
L40S = catalog.model_for_product("NVIDIA-L40S")
CONFIGS = {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "half": [
        {"devices": [0, 1, 2, 3], "mig-enabled": False},
        {
            "devices": [4, 5, 6, 7],
            "mig-enabled": True,
            "mig-devices": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
        },
    ],
    "too-much": [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "3g.40gb": 2}}],
    "bad-profile": [{"devices": "all", "mig-enabled": True, "mig-devices": {"9g.99gb": 1}}],
    "bad-index": [{"devices": [8], "mig-enabled": False}],
    "filtered": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}, "device-filter": "0x233010DE"},
        {
            "devices": "all",
            "mig-enabled": True,
            "mig-devices": {"1g.5gb": 7},
            "device-filter": ["0x20B010DE"],
        },
    ],
}


def test_all_and_index_entries() -> None:
    assert plan_layout(CONFIGS, "all-1g.10gb", H100, 8, [None] * 8) == [("1g.10gb",) * 7] * 8
    half = plan_layout(CONFIGS, "half", H100, 8, [("1g.10gb",)] * 8)
    assert half[:4] == [None] * 4
    assert sorted(half[7]) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert plan_layout(CONFIGS, "all-disabled", H100, 8, half) == [None] * 8


def test_device_filter_selects_entries_for_this_gpu_type() -> None:
    assert plan_layout(CONFIGS, "filtered", H100, 2, [None, None]) == [("7g.80gb",), ("7g.80gb",)]


@pytest.mark.parametrize(
    ("name", "model", "message"),
    [
        ("missing", H100, "not found"),
        ("too-much", H100, "does not fit"),
        ("bad-profile", H100, "no MIG profile"),
        ("bad-index", H100, "out of range"),
        ("all-1g.10gb", L40S, "not MIG capable"),
    ],
)
def test_configs_it_cannot_apply_fail(name: str, model: catalog.GPUModel, message: str) -> None:
    with pytest.raises(InvalidMigConfig, match=message):
        plan_layout(CONFIGS, name, model, 8, [None] * 8)
