"""Placed MIG layouts on one GPU: validity, enumeration and fit, derived from the catalog's placement rules.

A layout is a tuple of `Instance(profile, start)` sorted by start. Two instances conflict when their
memory-slice ranges overlap; the layout must also stay within the GPU's compute slices and max counts.
Nothing here lists layouts by hand: the reference's 19 maximal layouts (7-compute/8-memory GPUs) and A30's 5
come out of `enumerate_layouts`.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from kgwe.errors import KgweError
from kgwe.gpu.catalog import GPUModel, MigProfile


class Instance(NamedTuple):
    profile: str
    start: int


Layout = tuple[Instance, ...]


def primary_profiles(model: GPUModel) -> tuple[MigProfile, ...]:
    """Per compute size, the plain profile with the highest max count (mig-parted's `all-balanced` rule).

    On 7-slot GPUs that is {1g, 2g, 3g, 4g, 7g} without the 2-memory-slice 1g, largest first.
    """
    best: dict[int, MigProfile] = {}
    for p in model.base_profiles:
        held = best.get(p.compute_slices)
        if held is None or (p.max_count, -p.memory_slices) > (held.max_count, -held.memory_slices):
            best[p.compute_slices] = p
    return tuple(sorted(best.values(), key=lambda p: -p.compute_slices))


def ordered(instances: Iterable[Instance | tuple[str, int]]) -> Layout:
    """Canonical form of a layout: instances sorted by start slot."""
    return tuple(sorted((Instance(n, s) for n, s in instances), key=lambda i: (i.start, i.profile)))


def _mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def _profiles(model: GPUModel, names: Iterable[str] | None) -> tuple[MigProfile, ...]:
    if names is None:
        return primary_profiles(model)
    profiles = {model.profile(n).name: model.profile(n) for n in names}
    return tuple(sorted(profiles.values(), key=lambda p: (-p.compute_slices, -p.memory_slices, p.name)))


def check_layout(model: GPUModel, layout: Sequence[Instance | tuple[str, int]]) -> Layout:
    """The layout, sorted, if it is valid on `model`; KgweError saying what is wrong otherwise."""
    if isinstance(layout, tuple):
        try:
            return _check(model, layout)  # already hashable: skip the copy (plans check 10,000s of these)
        except TypeError:
            pass
    return _check(model, tuple((str(n), int(s)) for n, s in layout))


@functools.lru_cache(maxsize=4096)
def _check(model: GPUModel, layout: tuple[tuple[str, int], ...]) -> Layout:
    if not model.mig_capable:
        raise KgweError(f"{model.key} does not support MIG")
    used = 0
    compute = 0
    counts: Counter[str] = Counter()
    for name, start in layout:
        p = model.profile(name)
        size = p.memory_slices
        if (start, size) not in p.placements:
            valid = list(p.starts)
            raise KgweError(f"{model.key}: {name} cannot start at memory slice {start} (valid: {valid})")
        mask = _mask(start, size)
        if used & mask:
            raise KgweError(f"{model.key}: {name}@{start} overlaps another instance's memory slices")
        used |= mask
        compute += p.compute_slices
        counts[name] += 1
        if counts[name] > p.max_count:
            raise KgweError(f"{model.key}: at most {p.max_count} × {name} per GPU")
    if compute > model.compute_slots:
        have = model.compute_slots
        raise KgweError(f"{model.key}: layout needs {compute} compute slices, the GPU has {have}")
    return ordered(layout)


def is_valid(model: GPUModel, layout: Sequence[Instance | tuple[str, int]]) -> bool:
    try:
        check_layout(model, layout)
    except KgweError:
        return False
    return True


@functools.cache
def _enumerate(model: GPUModel, profiles: tuple[MigProfile, ...]) -> tuple[Layout, ...]:
    """Every valid placed layout over `profiles` (including the empty one), by a walk over memory slots."""
    out: list[Layout] = []

    def walk(slot: int, used: int, compute: int, counts: dict[str, int], acc: list[Instance]) -> None:
        if slot >= model.memory_slots:
            out.append(ordered(acc))
            return
        if used >> slot & 1:
            walk(slot + 1, used, compute, counts, acc)
            return
        walk(slot + 1, used, compute, counts, acc)  # leave this slot to a later start (or idle)
        for p in profiles:
            if (slot, p.memory_slices) not in p.placements or counts.get(p.name, 0) >= p.max_count:
                continue
            mask = _mask(slot, p.memory_slices)
            if used & mask or compute + p.compute_slices > model.compute_slots:
                continue
            counts[p.name] = counts.get(p.name, 0) + 1
            acc.append(Instance(p.name, slot))
            walk(slot + 1, used | mask, compute + p.compute_slices, counts, acc)
            acc.pop()
            counts[p.name] -= 1

    walk(0, 0, 0, {}, [])
    return tuple(sorted(set(out), key=lambda lay: [(i.start, i.profile) for i in lay]))


def _can_add(model: GPUModel, layout: Layout, profiles: tuple[MigProfile, ...]) -> bool:
    used = 0
    compute = 0
    counts: Counter[str] = Counter()
    for name, start in layout:
        p = model.profiles[name]
        used |= _mask(start, p.memory_slices)
        compute += p.compute_slices
        counts[name] += 1
    for p in profiles:
        if counts[p.name] >= p.max_count or compute + p.compute_slices > model.compute_slots:
            continue
        if any(not used & _mask(s, size) for s, size in p.placements):
            return True
    return False


def enumerate_layouts(
    model: GPUModel, profiles: Iterable[str] | None = None, *, maximal: bool = True
) -> list[Layout]:
    """All valid placed layouts over `profiles` (default: `primary_profiles`); `maximal` keeps only those to
    which no further instance of those profiles can be added."""
    if not model.mig_capable:
        raise KgweError(f"{model.key} does not support MIG")
    chosen = _profiles(model, profiles)
    layouts = _enumerate(model, chosen)
    if maximal:
        return [lay for lay in layouts if not _can_add(model, lay, chosen)]
    return [lay for lay in layouts if lay]


def feasible_multisets(
    model: GPUModel, profiles: Iterable[str] | None = None, *, maximal: bool = False
) -> list[tuple[tuple[str, int], ...]]:
    """Distinct non-empty profile multisets (sorted (name, count) pairs) that fit on one GPU; `maximal` keeps
    those no further instance can be added to."""
    chosen = _profiles(model, profiles)
    sets = {_multiset(lay) for lay in _enumerate(model, chosen) if lay}
    if maximal:
        sets = {ms for ms in sets if not any(_multiset_add(ms, p.name) in sets for p in chosen)}
    return sorted(sets)


def _multiset(layout: Iterable[Instance | tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(Counter(name for name, _ in layout).items()))


def _multiset_add(ms: tuple[tuple[str, int], ...], name: str) -> tuple[tuple[str, int], ...]:
    counts = Counter(dict(ms))
    counts[name] += 1
    return tuple(sorted(counts.items()))


def fit(
    model: GPUModel, profiles: Iterable[str], fixed: Sequence[Instance | tuple[str, int]] = ()
) -> Layout | None:
    """Where `profiles` (a multiset of names) can be placed on one GPU next to the `fixed` instances.

    Returns the whole placed layout (fixed + new), or None if they do not fit. Deterministic: largest profiles
    first, lowest free start first, backtracking when a choice blocks a later profile.
    """

    def size(name: str) -> tuple[int, int, str]:
        p = model.profile(name)
        return (-p.compute_slices, -p.memory_slices, name)

    names = sorted(profiles, key=size)
    return _fit(model, tuple(names), check_layout(model, fixed))


@functools.lru_cache(maxsize=65536)
def _fit(model: GPUModel, names: tuple[str, ...], fixed: Layout) -> Layout | None:
    used = 0
    compute = 0
    counts: Counter[str] = Counter()
    for name, start in fixed:
        p = model.profiles[name]
        used |= _mask(start, p.memory_slices)
        compute += p.compute_slices
        counts[name] += 1
    need = compute + sum(model.profiles[n].compute_slices for n in names)
    if need > model.compute_slots:
        return None
    for name, count in Counter(names).items():
        if counts[name] + count > model.profiles[name].max_count:
            return None
    placed: list[Instance] = []

    def place(i: int, used: int) -> bool:
        if i == len(names):
            return True
        p = model.profiles[names[i]]
        # identical profiles in a row: keep starts increasing so permutations are not retried
        lowest = placed[-1].start + 1 if i and names[i - 1] == names[i] else 0
        for start, size in p.placements:
            mask = _mask(start, size)
            if start < lowest or used & mask:
                continue
            placed.append(Instance(p.name, start))
            if place(i + 1, used | mask):
                return True
            placed.pop()
        return False

    if not place(0, used):
        return None
    return ordered((*fixed, *placed))


def idle_slices(model: GPUModel, layout: Iterable[Instance | tuple[str, int]]) -> tuple[int, int]:
    """(idle compute slices, idle memory slices) of a layout."""
    compute = memory = 0
    for name, _ in layout:
        p = model.profiles[name]
        compute += p.compute_slices
        memory += p.memory_slices
    return model.compute_slots - compute, model.memory_slots - memory


def describe(layout: Iterable[Instance | tuple[str, int]]) -> str:
    """`3g.40gb@0 2g.20gb@4 1g.10gb@6`, or `(empty)`."""
    text = " ".join(f"{name}@{start}" for name, start in layout)
    return text or "(empty)"
