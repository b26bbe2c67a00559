"""GPU models and their MIG profiles, loaded once from the checked-in `mig_models.yaml`.

Profile names are only meaningful together with a model (`1g.10gb` is a 1-slot profile on 80GB parts and a
2-slot one on A100-40GB), so everything here is looked up through a `GPUModel`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml

from kgwe.errors import KgweError
from kgwe.vocab import mig_resource

_DATA_FILE = "mig_models.yaml"
_NAME_GB = re.compile(r"^\d+g\.(\d+)gb")


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of one model. `placements` are (start, size) on the memory-slice axis."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_mib: int
    max_count: int
    placements: tuple[tuple[int, int], ...]

    @property
    def starts(self) -> tuple[int, ...]:
        return tuple(start for start, _ in self.placements)

    @property
    def is_base(self) -> bool:
        """True for plain profiles (no +me/+gfx/-me attribute): the ones a planner partitions a GPU into."""
        return "+" not in self.name and "-" not in self.name

    @property
    def resource_name(self) -> str:
        """Extended resource the device plugin advertises for it under the mixed strategy."""
        return mig_resource(self.name)


@dataclass(frozen=True)
class GPUModel:
    """A GPU SKU family with one MIG geometry. Hashable by `key`."""

    key: str
    name: str
    products: tuple[str, ...]
    memory_mib: int
    mig_capable: bool
    compute_slots: int
    memory_slots: int
    profiles: Mapping[str, MigProfile]
    pci_device_ids: tuple[str, ...]
    aliases: tuple[str, ...] = field(default=())
    compute_capability: tuple[int, int] | None = None  # CUDA (major, minor), e.g. (8, 9) for an L40S

    def __hash__(self) -> int:
        return hash(self.key)

    def profile(self, name: str) -> MigProfile:
        """The profile called `name` on this model; KgweError naming the valid ones otherwise."""
        try:
            return self.profiles[name]
        except KeyError:
            valid = ", ".join(self.profiles) or "none (MIG not supported)"
            raise KgweError(f"{self.key} has no MIG profile {name!r}; valid profiles: {valid}") from None

    @property
    def base_profiles(self) -> tuple[MigProfile, ...]:
        """Plain profiles, largest first (the order a placement search wants)."""
        base = [p for p in self.profiles.values() if p.is_base]
        return tuple(sorted(base, key=lambda p: (-p.compute_slices, -p.memory_slices, p.name)))


def _profile_from(
    cls: Mapping[str, Any], name: str, model_memory_mib: int, measured: Mapping[str, int]
) -> MigProfile:
    size = int(cls["memory"])
    match = _NAME_GB.match(name)
    nominal = int(match.group(1)) * 1024 if match else model_memory_mib * size // 8
    return MigProfile(
        name=name,
        compute_slices=int(cls["compute"]),
        memory_slices=size,
        memory_mib=int(measured.get(name, nominal)),
        max_count=int(cls["max"]),
        placements=tuple((int(s), size) for s in cls["starts"]),
    )


def _model_from(key: str, raw: Mapping[str, Any], geometries: Mapping[str, Any]) -> GPUModel:
    geometry = geometries.get(str(raw["geometry"])) if raw.get("geometry") else None
    profiles: dict[str, MigProfile] = {}
    if geometry:
        for cls_name, profile_name in raw["profiles"].items():
            cls = geometry["classes"][cls_name]
            measured = raw.get("measured_mib", {})
            profiles[profile_name] = _profile_from(cls, profile_name, int(raw["memory_mib"]), measured)
    return GPUModel(
        key=key,
        name=raw["name"],
        products=tuple(raw.get("products", ())),
        memory_mib=int(raw["memory_mib"]),
        mig_capable=bool(geometry),
        compute_slots=int(geometry["compute_slots"]) if geometry else 0,
        memory_slots=int(geometry["memory_slots"]) if geometry else 0,
        profiles=MappingProxyType(profiles),
        pci_device_ids=tuple(raw.get("pci_device_ids", ())),
        aliases=tuple(raw.get("aliases", ())),
        compute_capability=_capability(raw.get("compute_capability")),
    )


def _capability(text: object) -> tuple[int, int] | None:
    """Parse "8.9" as (8, 9); None when the data file does not say."""
    if text is None:
        return None
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


@functools.cache
def _catalog() -> tuple[GPUModel, ...]:
    text = resources.files("kgwe.gpu").joinpath(_DATA_FILE).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    return tuple(_model_from(key, raw, data["geometries"]) for key, raw in data["models"].items())


def all_models() -> list[GPUModel]:
    return list(_catalog())


def mig_models() -> list[GPUModel]:
    return [m for m in _catalog() if m.mig_capable]


def model_by_key(key: str) -> GPUModel:
    for model in _catalog():
        if model.key.lower() == key.lower():
            return model
    known = ", ".join(m.key for m in _catalog())
    raise KgweError(f"unknown GPU model {key!r}; known models: {known}")


def _normalize(text: str) -> str:
    """Upper-case, '-'-separated, without vendor prefix and the suffixes GFD appends (-MIG-<p>, -SHARED)."""
    t = re.sub(r"[\s_]+", "-", text.strip()).upper()
    t = re.sub(r"^(NVIDIA|TESLA)-", "", t)
    t = re.sub(r"^(NVIDIA|TESLA)-", "", t)
    t = re.sub(r"-MIG-.*$", "", t)
    t = re.sub(r"-SHARED$", "", t)
    return t.strip("-")


@functools.cache
def _names_by_model() -> tuple[tuple[GPUModel, tuple[str, ...]], ...]:
    return tuple(
        (m, tuple(dict.fromkeys(_normalize(n) for n in (m.key, *m.aliases, *m.products)))) for m in _catalog()
    )


@functools.lru_cache(maxsize=1024)  # a fleet repeats a few products on thousands of nodes
def model_for_product(product: str) -> GPUModel | None:
    """The model a GFD `nvidia.com/gpu.product` value names exactly (case-insensitive), else None."""
    wanted = _normalize(product)
    if not wanted:
        return None
    for model in _catalog():
        if any(_normalize(p) == wanted for p in model.products):
            return model
    return None


def models_matching(text: str) -> list[GPUModel]:
    """Models a label value names: "H100" -> all H100 variants, "A100-80GB" -> one, a product -> its model.

    A model matches when every '-'-separated token of the text appears in one of its names (key, alias or
    product), so a more specific value names fewer models. Exact product/key/alias matches win; an unlisted
    product falls back to its family (first token), narrowed by a memory token such as "141GB".
    """
    wanted = _normalize(text)
    if not wanted:
        return []
    exact = [m for m, names in _names_by_model() if wanted in names]
    if exact:
        return exact
    tokens = set(wanted.split("-"))
    found = [m for m, names in _names_by_model() if any(tokens <= set(n.split("-")) for n in names)]
    if found:
        return found
    return _family_matches(wanted)


def _family_matches(wanted: str) -> list[GPUModel]:
    """Last resort for product strings we do not list (e.g. "NVIDIA-H200-141GB-HBM3e"): the models of the
    family named by the first token, narrowed by a memory-size token when one matches."""
    family, *rest = wanted.split("-")
    found = [m for m, names in _names_by_model() if any(n.split("-")[0] == family for n in names)]
    sizes = {t for t in rest if re.fullmatch(r"\d+GB?", t)}
    narrowed = [m for m in found if sizes & set(m.key.upper().split("-"))]
    return narrowed or found
