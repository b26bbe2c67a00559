"""Per-GPU layouts -> mig-parted `mig-configs` (docs/facts/mig.md §4), one config per distinct node shape.

Config names come from the content only, so two nodes with the same per-GPU layouts share one config and a
re-render of the same plan yields byte-identical names (no churn in the ConfigMap or node labels).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kgwe.errors import KgweError
from kgwe.vocab import CONFIG_NAME_PREFIX, MIG_ALL_DISABLED, MIG_DEVICES_KEY, MIG_ENABLED_KEY

_LABEL_VALUE_MAX = 63
_PROFILE = re.compile(r"^\d+g\.\d+gb([+-][a-z.]+)?$")

DeviceEntry = dict[
    str, Any
]  # {"devices": "all" | [idx...], "mig-enabled": bool, "mig-devices": {profile: count}}


GpuKey = tuple[bool, tuple[tuple[str, int], ...]]


def _gpu_entry(node: str, index: int, layout: Sequence[str] | None) -> GpuKey:
    if layout is None:
        return (False, ())
    if isinstance(layout, str):
        raise KgweError(f"node {node} GPU {index}: layout must be a list of profile names, got {layout!r}")
    for name in layout:
        if not isinstance(name, str) or not _PROFILE.match(name):
            raise KgweError(f"node {node} GPU {index}: {name!r} is not a MIG profile name like '1g.10gb'")
    return (True, tuple(sorted(Counter(layout).items())))


def _node_entries(node: str, gpus: Sequence[Sequence[str] | None]) -> list[DeviceEntry]:
    groups: dict[GpuKey, list[int]] = {}
    for index, layout in enumerate(gpus):
        groups.setdefault(_gpu_entry(node, index, layout), []).append(index)
    entries = []
    for (enabled, devices), indices in sorted(groups.items(), key=lambda kv: kv[1][0]):
        entries.append(
            {
                "devices": "all" if len(groups) == 1 else indices,
                MIG_ENABLED_KEY: enabled,
                MIG_DEVICES_KEY: dict(devices),
            }
        )
    return entries


def _shape(gpus: Sequence[Sequence[str] | None]) -> tuple[tuple[str, ...] | None, ...] | None:
    """A node's per-GPU layouts as a hashable key; None for a malformed one (a layout given as one string, or
    not iterable), which is checked on its own so that the error names its node."""
    if any(isinstance(g, str) for g in gpus):
        return None
    try:
        return tuple(None if g is None else tuple(g) for g in gpus)
    except TypeError:
        return None


def config_name(entries: Sequence[DeviceEntry]) -> str:
    """Readable name when every GPU is alike and it fits a label value; else a content hash."""
    if len(entries) == 1 and entries[0]["devices"] == "all":
        entry = entries[0]
        if not entry[MIG_ENABLED_KEY]:
            return CONFIG_NAME_PREFIX + MIG_ALL_DISABLED
        if not entry[MIG_DEVICES_KEY]:
            return f"{CONFIG_NAME_PREFIX}all-enabled"
        parts = "-".join(f"{count}x{p.replace('+', '.')}" for p, count in entry[MIG_DEVICES_KEY].items())
        name = f"{CONFIG_NAME_PREFIX}all-{parts}"
        if len(name) <= _LABEL_VALUE_MAX:
            return name
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:12]
    return CONFIG_NAME_PREFIX + digest


def build_mig_configs(
    layouts: Mapping[str, Sequence[Sequence[str] | None]],
) -> tuple[dict[str, list[DeviceEntry]], dict[str, str]]:
    """(config name -> device entries, node -> config name) for the mig-parted ConfigMap and node labels.

    `layouts[node][i]` is GPU i's layout: None = MIG disabled, a list of profile names = MIG enabled with
    those instances ([] = enabled, no instances). Nodes with no GPUs are skipped.
    """
    configs: dict[str, list[DeviceEntry]] = {}
    node_config: dict[str, str] = {}
    named: dict[tuple[tuple[str, ...] | None, ...], str] = {}  # node shape -> config (fleets repeat a few)
    for node in sorted(layouts):
        gpus = layouts[node]
        if not gpus:
            continue
        shape = _shape(gpus)
        name = named.get(shape) if shape is not None else None
        if name is None:
            entries = _node_entries(node, gpus)
            name = config_name(entries)
            configs.setdefault(name, entries)
            if shape is not None:
                named[shape] = name
        node_config[node] = name
    return dict(sorted(configs.items())), node_config
