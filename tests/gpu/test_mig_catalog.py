"""The catalog reproduces docs/facts/mig.md §2 and resolves the label values people actually write."""

from __future__ import annotations

import pytest

from kgwe.errors import KgweError
from kgwe.gpu import catalog

# docs/facts/mig.md §2, MIG User Guide tables: model -> (PCI ids, 1g, 1g+me, 1g double-mem, 2g, 3g, 4g, 7g)
SEVEN_SLICE = {
    "A100-40GB": (
        "0x20B010DE,0x20B110DE,0x20F110DE,0x20F610DE",
        "1g.5gb 1g.5gb+me 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb",
    ),
    "A100-80GB": (
        "0x20B210DE,0x20B510DE,0x20F310DE,0x20F510DE",
        "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
    ),
    "H100-80GB": (
        "0x233010DE,0x233110DE,0x232210DE,0x232410DE",
        "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
    ),
    "H100-94GB": ("0x232110DE,0x233A10DE", "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.47gb 4g.47gb 7g.94gb"),
    "H100-96GB": (
        "0x234210DE,0x233D10DE,0x232910DE,0x20B610DE",
        "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.48gb 4g.48gb 7g.96gb",
    ),
    "H200-141GB": ("0x233510DE,0x233B10DE", "1g.18gb 1g.18gb+me 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb"),
    "GH200-144GB": ("0x234810DE", "1g.18gb 1g.18gb+me 1g.36gb 2g.36gb 3g.72gb 4g.72gb 7g.144gb"),
    "B200-180GB": ("0x290110DE", "1g.23gb 1g.23gb+me 1g.45gb 2g.45gb 3g.90gb 4g.90gb 7g.180gb"),
    "GB200-186GB": ("0x294110DE", "1g.23gb 1g.23gb+me 1g.47gb 2g.47gb 3g.93gb 4g.93gb 7g.186gb"),
    "B300": ("0x318210DE", "1g.34gb 1g.34gb+me 1g.67gb 2g.67gb 3g.135gb 4g.135gb 7g.269gb"),
    "GB300": ("0x31C210DE", "1g.35gb 1g.35gb+me 1g.70gb 2g.70gb 3g.139gb 4g.139gb 7g.278gb"),
}
# class -> (compute, memory slices, starts, max count), the placement table of §2
SEVEN_TABLE = [
    (1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    (1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    (1, 2, (0, 2, 4, 6), 4),
    (2, 2, (0, 2, 4), 3),
    (3, 4, (0, 4), 2),
    (4, 4, (0,), 1),
    (7, 8, (0,), 1),
]


@pytest.mark.parametrize("key", sorted(SEVEN_SLICE))
def test_seven_slice_models_match_reference_table(key):
    pci, names = SEVEN_SLICE[key]
    model = catalog.model_by_key(key)
    assert model.mig_capable and (model.compute_slots, model.memory_slots) == (7, 8)
    assert model.pci_device_ids == tuple(pci.split(","))
    assert model.products, "every model needs at least one GFD product string"
    for name, (compute, memory, starts, max_count) in zip(names.split(), SEVEN_TABLE, strict=True):
        profile = model.profile(name)
        assert (profile.compute_slices, profile.memory_slices, profile.starts, profile.max_count) == (
            compute,
            memory,
            starts,
            max_count,
        ), name
        assert all(size == memory for _, size in profile.placements)
    assert set(model.profiles) == set(names.split())


def test_four_slice_models():
    a30 = catalog.model_by_key("A30-24GB")
    assert (a30.compute_slots, a30.memory_slots, a30.pci_device_ids) == (4, 4, ("0x20B710DE",))
    got = {p.name: (p.compute_slices, p.starts, p.max_count) for p in a30.profiles.values()}
    assert got == {
        "1g.6gb": (1, (0, 1, 2, 3), 4),
        "1g.6gb+me": (1, (0, 1, 2, 3), 1),
        "2g.12gb": (2, (0, 2), 2),
        "2g.12gb+me": (2, (0, 2), 1),
        "4g.24gb": (4, (0,), 1),
    }
    rtx = catalog.model_by_key("RTX-PRO-6000-96GB")
    assert rtx.pci_device_ids == ("0x2BB510DE",)
    assert {p.name: p.max_count for p in rtx.profiles.values()} == {
        "1g.24gb": 4,
        "1g.24gb+gfx": 4,
        "1g.24gb-me": 4,
        "1g.24gb+me": 1,
        "1g.24gb+me.all": 1,
        "2g.48gb": 2,
        "2g.48gb+gfx": 2,
        "2g.48gb-me": 2,
        "2g.48gb+me.all": 1,
        "4g.96gb": 1,
        "4g.96gb+gfx": 1,
    }
    assert [p.name for p in rtx.base_profiles] == ["4g.96gb", "2g.48gb", "1g.24gb"]


def test_profile_names_are_per_model():
    # 1g.10gb: 1 memory slice, 7 per GPU on 80GB parts; 2 memory slices, 4 per GPU on A100-40GB
    assert catalog.model_by_key("H100-80GB").profile("1g.10gb").memory_slices == 1
    assert catalog.model_by_key("A100-40GB").profile("1g.10gb").memory_slices == 2
    assert catalog.model_by_key("A100-40GB").profile("1g.10gb").max_count == 4


def test_measured_memory_sizes():
    h100 = catalog.model_by_key("H100-80GB")
    assert (h100.profile("1g.10gb").memory_mib, h100.profile("3g.40gb").memory_mib) == (9984, 40320)
    assert catalog.model_by_key("A100-40GB").profile("1g.5gb").memory_mib == 4864
    # unmeasured: nominal GB from the name
    assert catalog.model_by_key("B200-180GB").profile("3g.90gb").memory_mib == 90 * 1024


def test_every_pci_id_and_product_belongs_to_one_model():
    pci = [i for m in catalog.all_models() for i in m.pci_device_ids]
    products = [p.lower() for m in catalog.all_models() for p in m.products]
    assert len(pci) == len(set(pci)) and len(products) == len(set(products))
    for model in catalog.all_models():
        for product in model.products:
            assert catalog.model_for_product(product) is model


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("H100", ["H100-80GB", "H100-94GB", "H100-96GB"]),
        ("h100", ["H100-80GB", "H100-94GB", "H100-96GB"]),
        ("A100", ["A100-40GB", "A100-80GB"]),
        ("A100-80GB", ["A100-80GB"]),
        ("a100-40gb", ["A100-40GB"]),
        ("H100-80GB-HBM3", ["H100-80GB"]),
        ("NVIDIA-H100-80GB-HBM3", ["H100-80GB"]),
        ("nvidia-h100-80gb-hbm3", ["H100-80GB"]),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", ["H100-80GB"]),
        ("NVIDIA-A100-SXM4-80GB-SHARED", ["A100-80GB"]),
        ("NVIDIA A100-SXM4-40GB", ["A100-40GB"]),
        ("H100-NVL", ["H100-94GB"]),
        ("A30", ["A30-24GB"]),
        ("B200", ["B200-180GB"]),
        ("GB200", ["GB200-186GB"]),
        ("SXM4", ["A100-40GB", "A100-80GB"]),
        ("L40S", ["L40S"]),
        ("Tesla-T4", ["T4"]),
        ("NVIDIA-H200-141GB-HBM3e", ["H200-141GB"]),
        ("NVIDIA-B200-192GB-HBM3e", ["B200-180GB"]),
        ("NVIDIA-H100-94GB-HBM2e", ["H100-94GB"]),
        ("H300", []),
        ("", []),
        ("NVIDIA", []),
    ],
)
def test_models_matching(text, keys):
    assert [m.key for m in catalog.models_matching(text)] == keys


def test_model_for_product_is_exact():
    assert catalog.model_for_product("H100") is None
    assert catalog.model_for_product("NVIDIA-H100-PCIe").key == "H100-80GB"
    assert catalog.model_for_product("nvidia-gh200-480gb").key == "H100-96GB"


def test_unknown_model_and_profile_are_clear_errors():
    with pytest.raises(KgweError, match=r"unknown GPU model 'Z9'.*H100-80GB"):
        catalog.model_by_key("Z9")
    with pytest.raises(KgweError, match=r"no MIG profile '1g.5gb'.*1g.10gb"):
        catalog.model_by_key("H100-80GB").profile("1g.5gb")
    assert catalog.model_by_key("h100-80gb").key == "H100-80GB"


def test_models_are_hashable_and_non_mig_models_have_no_profiles():
    assert len({*catalog.all_models(), *catalog.all_models()}) == len(catalog.all_models())
    t4 = catalog.model_by_key("T4")
    assert not t4.mig_capable and not t4.profiles and t4.compute_slots == 0
    me = catalog.model_by_key("H100-80GB").profile("1g.10gb+me")
    assert me.resource_name == "nvidia.com/mig-1g.10gb.me"
