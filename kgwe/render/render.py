"""Policy + inventory -> the Kubernetes objects KGWE applies, rendered through templates/.

Output is a pure function of the inputs: same policy, inventory and options give byte-identical text
(sorted keys and names, no clocks), so `kgwe render` output can be diffed and committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgwe.errors import KgweError
from kgwe.planner.migparted import build_mig_configs
from kgwe.policy.loader import PolicySet
from kgwe.policy.models import GPUInventory
from kgwe.render.layouts import NodeLayouts, desired_layouts
from kgwe.render.objects import (
    RenderedFile,
    budget_quotas,
    check_options,
    device_plugin_configmap,
    mig_parted_configmap,
    node_mig_labels,
    node_sharing_labels,
    pod_template_policy_configmap,
    runtimes_configmap,
    scheduler_configmap,
    scoring_configmap,
)
from kgwe.render.options import (  # noqa: F401  (re-exported: where callers have always found them)
    DEFAULT_EXTENDER_CLIENT_CERT_DIR,
    MigConfigs,
    QuotaCaps,
    standalone_extender_url,
)
from kgwe.render.options import (
    DEFAULT_EXTENDER_URL as DEFAULT_EXTENDER_URL,
)
from kgwe.render.options import (
    RenderOptions as RenderOptions,
)
from kgwe.render.options import (
    extender_client_cert_dir as extender_client_cert_dir,
)
from kgwe.render.sharing import config_key, device_plugin_configs, node_sharing
from kgwe.vocab import (
    MIG_ALL_DISABLED,
    MIG_DEVICES_KEY,
    MIG_ENABLED_KEY,
    SCHEDULER_CONFIG_KEY,
    SCHEDULER_CONFIGMAP,
)

# Configs the GPU Operator itself puts on MIG-capable nodes (docs/facts/mig.md §5); a replacement
# mig-parted config must still define them, or nodes KGWE does not manage would fail.
OPERATOR_DEFAULT_CONFIGS = {
    MIG_ALL_DISABLED: [{"devices": "all", MIG_ENABLED_KEY: False, MIG_DEVICES_KEY: {}}],
}


@dataclass
class Rendered:
    """Rendered files (name -> text) and the objects they hold, in apply order."""

    files: dict[str, str] = field(default_factory=dict)
    objects: list[dict[str, Any]] = field(default_factory=list)
    layouts: NodeLayouts = field(default_factory=dict)
    node_configs: dict[str, str] = field(default_factory=dict)
    sharing_configs: dict[str, str] = field(default_factory=dict)  # node -> device-plugin config key


@dataclass(frozen=True)
class Decided:
    """What the policy decides on an inventory before anything is rendered."""

    layouts: NodeLayouts
    mig_configs: MigConfigs  # planned configs plus the kept ones
    node_configs: dict[str, str]  # node -> mig-parted config
    sharing: dict[str, str] | None  # device-plugin config key -> text (None: no device-plugin ConfigMap)
    node_sharing: dict[str, str]  # node -> device-plugin config key


def decide(
    ps: PolicySet,
    inventory: GPUInventory | None,
    layouts: Mapping[str, Sequence[Sequence[str] | None]] | None,
    keep_mig_configs: Mapping[str, list[dict[str, Any]]] | None,
    keep_sharing_configs: Mapping[str, str] | None,
) -> Decided:
    """MIG layouts (planned here unless given), the mig-parted configs naming them, and the sharing configs.

    `keep_mig_configs` are configs nodes still name: they stay beside the planned ones until no node's
    label names them. Likewise `keep_sharing_configs` (key -> config text) for the device-plugin ConfigMap,
    which is rendered while any strategy shares GPUs or any node still names one of its keys."""
    if layouts is None:
        layouts = desired_layouts(ps.mig_strategies, inventory) if inventory is not None else {}
    node_layouts: NodeLayouts = {
        n: [None if g is None else list(g) for g in gpus] for n, gpus in layouts.items()
    }
    mig_configs, node_configs = build_mig_configs(node_layouts)
    for name, entries in {**OPERATOR_DEFAULT_CONFIGS, **(keep_mig_configs or {})}.items():
        mig_configs.setdefault(name, entries)
    if not (ps.sharing_strategies or keep_sharing_configs):
        return Decided(node_layouts, mig_configs, node_configs, None, {})
    configs = device_plugin_configs(ps.sharing_strategies)
    for key, text in (keep_sharing_configs or {}).items():
        configs.setdefault(key, text)
    nodes = [(n.name, n.labels) for n in inventory.spec.nodes] if inventory is not None else []
    shared = node_sharing(ps.sharing_strategies, nodes)
    node_sharing_keys = {node: config_key(strategy) for node, strategy in shared.items()}
    return Decided(node_layouts, mig_configs, node_configs, configs, node_sharing_keys)


def _policy_configmaps(ps: PolicySet, decided: Decided, opts: RenderOptions) -> list[RenderedFile]:
    """The ConfigMaps every rendering holds, mig-parted's first (before any node label names a new config)."""
    return [
        mig_parted_configmap(decided.mig_configs, opts),
        scheduler_configmap(ps, decided.layouts, opts),
        scoring_configmap(ps, opts),
        runtimes_configmap(ps, opts),
        pod_template_policy_configmap(ps, opts),
    ]


def cluster_objects(ps: PolicySet, decided: Decided, opts: RenderOptions) -> list[dict[str, Any]]:
    """The objects the controller server-side applies, in apply order: the ConfigMaps (mig-parted first,
    before any node label names a new config). Node labels go through the rollout and budget quotas are
    rendered apart (`budget_quotas`), with the caps of the moment."""
    check_options(opts)
    files = _policy_configmaps(ps, decided, opts)
    if decided.sharing is not None:
        files.append(device_plugin_configmap(decided.sharing, opts))
    return [o for f in files for o in f.objects]


def render(
    ps: PolicySet,
    inventory: GPUInventory | None = None,
    *,
    options: RenderOptions | None = None,
    layouts: Mapping[str, Sequence[Sequence[str] | None]] | None = None,
    keep_mig_configs: Mapping[str, list[dict[str, Any]]] | None = None,
    keep_sharing_configs: Mapping[str, str] | None = None,
    quota_caps: QuotaCaps | None = None,
) -> Rendered:
    """Render every object for a valid PolicySet, one file per kind of object (KgweError when the policy
    has errors). See `decide` for `layouts` and the kept configs, `budget_quotas` for `quota_caps`."""
    ps.raise_for_errors()
    opts = options or RenderOptions()
    check_options(opts)
    inventory = inventory if inventory is not None else ps.inventory()
    decided = decide(ps, inventory, layouts, keep_mig_configs, keep_sharing_configs)
    files = [
        *_policy_configmaps(ps, decided, opts),
        budget_quotas(ps, opts, quota_caps),
        node_mig_labels(decided.node_configs, opts),
        device_plugin_configmap(decided.sharing, opts) if decided.sharing is not None else None,
        node_sharing_labels(decided.node_sharing, opts),
    ]
    kept = [f for f in files if f is not None]
    return Rendered(
        files={f.name: f.text for f in kept},
        objects=[o for f in kept for o in f.objects],
        layouts=decided.layouts,
        node_configs=decided.node_configs,
        sharing_configs=decided.node_sharing,
    )


def scheduler_config_text(objects: Sequence[Mapping[str, Any]]) -> str:
    """The KubeSchedulerConfiguration text of the rendered `kgwe-scheduler-config` ConfigMap."""
    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "ConfigMap" and meta.get("name") == SCHEDULER_CONFIGMAP:
            return str(obj["data"][SCHEDULER_CONFIG_KEY])
    raise KgweError(f"no ConfigMap {SCHEDULER_CONFIGMAP} among the rendered objects")


def render_repository(
    policy_set: PolicySet,
    inventory: GPUInventory | None = None,
    *,
    options: RenderOptions | None = None,
    layouts: Mapping[str, Sequence[Sequence[str] | None]] | None = None,
) -> list[dict[str, Any]]:
    """The desired Kubernetes objects (ConfigMaps, ResourceQuotas, Node label patches) as dicts."""
    return render(policy_set, inventory, options=options, layouts=layouts).objects
