"""GPUSharingStrategies -> NVIDIA device-plugin configs and the node label that selects one (pure).

The GPU Operator's device plugin (and GFD) read a ConfigMap of named configs; each node's
`nvidia.com/device-plugin.config` label names the key it runs with (docs/facts/sharing.md §1-§3). KGWE
renders one config per strategy plus `default` for every other node. Each config sets its own
`flags.migStrategy`: `none` on shared pools (the plugin refuses MPS under `mixed`, and KGWE shares whole
GPUs only) and `mixed` in `default`, so MIG pools and MPS pools coexist under one ClusterPolicy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from kgwe.policy.sharing_strategy import GPUSharingStrategy
from kgwe.vocab import CONFIG_NAME_PREFIX, GPU_RESOURCE

DEFAULT_CONFIG_KEY = "default"  # the ClusterPolicy's devicePlugin.config.default names it
CONFIG_VERSION = "v1"
MIG_STRATEGY_DEFAULT = "mixed"  # the strategy whose nvidia.com/mig-<profile> resources KGWE schedules
MIG_STRATEGY_SHARED = "none"
_MODE_KEY = {"TimeSlicing": "timeSlicing", "MPS": "mps"}
_MAX_KEY = 63  # a label value (and ConfigMap key) of at most 63 characters


class _Dumper(yaml.SafeDumper):
    pass


def config_key(strategy: GPUSharingStrategy) -> str:
    """The ConfigMap key (and label value) of a strategy's config: `kgwe-<name>-<digest of the config>`.

    The digest makes a changed strategy a new key, so the node label changes and the plugin's config-manager
    (which acts on label changes) restarts the plugin under the rollout's gates; the name is shortened to
    keep the key a valid label value (63 characters)."""
    text = yaml.dump(device_plugin_config(strategy), Dumper=_Dumper, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    name = strategy.name[: _MAX_KEY - len(CONFIG_NAME_PREFIX) - 1 - len(digest)].rstrip(".-")
    return f"{CONFIG_NAME_PREFIX}{name}-{digest}"


def device_plugin_config(strategy: GPUSharingStrategy) -> dict[str, Any]:
    """The `version: v1` device-plugin config of one strategy (one sharing section, never both)."""
    spec = strategy.spec
    block = {
        "renameByDefault": spec.rename_by_default,
        "failRequestsGreaterThanOne": spec.fails_requests_greater_than_one,
        "resources": [{"name": GPU_RESOURCE, "replicas": spec.replicas}],
    }
    return {
        "version": CONFIG_VERSION,
        "flags": {"migStrategy": MIG_STRATEGY_SHARED},
        "sharing": {_MODE_KEY[spec.mode]: block},
    }


def default_config() -> dict[str, Any]:
    """The config of nodes no strategy shares: whole GPUs and MIG instances as before."""
    return {"version": CONFIG_VERSION, "flags": {"migStrategy": MIG_STRATEGY_DEFAULT}}


def device_plugin_configs(strategies: Iterable[GPUSharingStrategy]) -> dict[str, str]:
    """ConfigMap data: key -> config YAML text (sorted keys, byte-identical for the same input)."""
    configs = {DEFAULT_CONFIG_KEY: default_config()}
    for strategy in strategies:
        configs[config_key(strategy)] = device_plugin_config(strategy)
    return {
        key: yaml.dump(value, Dumper=_Dumper, sort_keys=True, default_flow_style=False)
        for key, value in sorted(configs.items())
    }


def node_sharing(
    strategies: Sequence[GPUSharingStrategy], nodes: Iterable[tuple[str, Mapping[str, str]]]
) -> dict[str, GPUSharingStrategy]:
    """node name -> the strategy that shares it (the first by name; validation forbids overlaps)."""
    ordered = sorted(strategies, key=lambda s: s.name)
    out: dict[str, GPUSharingStrategy] = {}
    for name, labels in nodes:
        for strategy in ordered:
            if strategy.selects(dict(labels)):
                out[name] = strategy
                break
    return out
