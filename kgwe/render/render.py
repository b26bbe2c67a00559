"""Policy + inventory -> the Kubernetes objects KGWE applies, rendered through templates/.

Output is a pure function of the inputs: same policy, inventory and options give byte-identical text
(sorted keys and names, no clocks), so `kgwe render` output can be diffed and committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml

from kgwe.cluster.names import (
    POD_TEMPLATE_POLICY_CONFIGMAP,
    POD_TEMPLATE_POLICY_KEY,
    REPOSITORY_LABEL,
    RUNTIMES_CONFIG_KEY,
    RUNTIMES_CONFIGMAP,
    SCHEDULER_CONFIG_KEY,
    SCHEDULER_CONFIGMAP,
    SCHEDULER_NAME,
)
from kgwe.errors import KgweError
from kgwe.policy.loader import PolicySet
from kgwe.policy.models import GPUInventory, PodTemplatePolicy, ScoringProfile, ScoringProfileSpec
from kgwe.policy.pod_template_policy import pod_template_policies_json
from kgwe.policy.quota_namespaces import refused_quota_namespace
from kgwe.render.environment import render_template
from kgwe.render.layouts import NodeLayouts, desired_layouts
from kgwe.render.sharing import config_key, device_plugin_configs, node_sharing
from kgwe.vocab import GPU_RESOURCE, SHARED_GPU_RESOURCE, mig_resource

# deploy/: kube-scheduler calls the extender Service over mutual TLS, its client certificate mounted here
DEFAULT_EXTENDER_URL = "https://kgwe-extender.kgwe-system.svc:8443"
DEFAULT_EXTENDER_CLIENT_CERT_DIR = "/etc/kgwe/extender-client"
# Configs the GPU Operator itself puts on MIG-capable nodes (docs/facts/mig.md §5); a replacement
# mig-parted config must still define them, or nodes KGWE does not manage would fail.
OPERATOR_DEFAULT_CONFIGS = {
    "all-disabled": [{"devices": "all", "mig-enabled": False, "mig-devices": {}}],
}

try:
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader


@dataclass(frozen=True)
class RenderOptions:
    repository: str = "local"  # PolicyRepository name, put in a label on every object
    namespace: str = "kgwe-system"  # kgwe-scheduler-config, kgwe-scoring and kgwe-runtimes
    mig_namespace: str = "gpu-operator"  # where the GPU Operator's MIG manager reads its config
    mig_config_name: str = "kgwe-mig-parted-config"
    # the device plugin's config ConfigMap (ClusterPolicy devicePlugin.config.name), in mig_namespace
    device_plugin_config_name: str = "kgwe-device-plugin-config"
    extender_url: str = DEFAULT_EXTENDER_URL
    # kube-scheduler's client certificate for mutual TLS with the extender: a directory holding tls.crt,
    # tls.key and ca.crt (a mounted kubernetes.io/tls Secret); needs an https:// extender_url. None:
    # DEFAULT_EXTENDER_CLIENT_CERT_DIR for https, none for plain http
    extender_client_cert_dir: str | None = None
    scheduler_name: str = SCHEDULER_NAME  # the profile of the second scheduler GPU pods name
    scheduler_kubeconfig: str | None = None
    scheduler_leader_elect: bool = True  # on its own Lease (scheduler_name in `namespace`)
    revision: str | None = None  # Git revision, as an annotation when given


@dataclass
class Rendered:
    """Rendered files (name -> text) and the objects they hold, in apply order."""

    files: dict[str, str] = field(default_factory=dict)
    objects: list[dict] = field(default_factory=list)
    layouts: NodeLayouts = field(default_factory=dict)
    node_configs: dict[str, str] = field(default_factory=dict)
    sharing_configs: dict[str, str] = field(default_factory=dict)  # node -> device-plugin config key


def extender_client_cert_dir(url: str, given: str | None) -> str | None:
    """The client-certificate directory for an extender URL: the one given, else the deploy/ default for
    https and none for plain http (a command-line default that fits either scheme)."""
    if given:
        return given
    return DEFAULT_EXTENDER_CLIENT_CERT_DIR if url.startswith("https://") else None


def _build_mig_configs(layouts: NodeLayouts) -> tuple[dict[str, list[dict]], dict[str, str]]:
    from kgwe.planner.migparted import build_mig_configs

    return build_mig_configs(layouts)


def _managed_resources(ps: PolicySet, layouts: NodeLayouts) -> list[dict]:
    profiles = {p for gpus in layouts.values() for gpu in gpus if gpu for p in gpu}
    for strategy in ps.mig_strategies:
        if strategy.spec.mig_enabled and strategy.spec.partition_strategy:
            profiles.update(s.profile for s in strategy.spec.partition_strategy.preferred_profiles)
    out = [
        {"name": GPU_RESOURCE, "ignored": False},
        # accounted per physical GPU by the extender alone; no node advertises it
        {"name": SHARED_GPU_RESOURCE, "ignored": True},
    ]
    out += [{"name": mig_resource(p), "ignored": False} for p in sorted(profiles)]
    return out


def _scoring_payload(ps: PolicySet) -> tuple[str, dict]:
    profiles: Sequence[ScoringProfile] = ps.scoring_profiles
    default = ps.default_scoring_profile()
    if not profiles:
        spec = ScoringProfileSpec(default=True)
        return "default", {"default": spec.model_dump(mode="json", by_alias=True)}
    chosen = default.name if default else sorted(p.name for p in profiles)[0]
    payload = {p.name: p.spec.model_dump(mode="json", by_alias=True) for p in profiles}
    catalog = ps.pricing_catalog()
    if catalog is not None:  # what CostOptimized ranks by: on-demand price per GPU-hour and product
        prices = {g.product: str(g.on_demand_per_hour) for g in catalog.spec.gpus}
        for rendered in payload.values():
            rendered["prices"] = prices
    return chosen, payload


def _quotas(ps: PolicySet, kgwe_namespace: str) -> list[dict]:
    """One ResourceQuota per budgeted namespace; never in kube-* or KGWE's own namespace."""
    quotas = []
    for budget in sorted(ps.budgets, key=lambda b: b.name):
        hard = budget.spec.quota_hard()
        if not hard:
            continue
        for ns in budget.spec.namespaces:
            refused = refused_quota_namespace(ns, kgwe_namespace)
            if refused:
                raise KgweError(f"GPUBudget/{budget.name}: {refused}")
            quotas.append({"namespace": ns, "budget": budget.name, "team": budget.spec.team, "hard": hard})
    return sorted(quotas, key=lambda q: q["namespace"])


def render(
    ps: PolicySet,
    inventory: GPUInventory | None = None,
    *,
    options: RenderOptions | None = None,
    layouts: Mapping[str, Sequence[Sequence[str] | None]] | None = None,
    keep_mig_configs: Mapping[str, list[dict]] | None = None,
    keep_sharing_configs: Mapping[str, str] | None = None,
) -> Rendered:
    """Render every object for a valid PolicySet. KgweError when the policy has errors.

    `keep_mig_configs` are configs nodes still name (the controller passes them): they stay in the
    mig-parted ConfigMap beside the planned ones until no node's label names them. Likewise
    `keep_sharing_configs` (key -> config text) for the device-plugin ConfigMap, which is rendered while
    any strategy shares GPUs or any node still names one of its keys."""
    ps.raise_for_errors()
    opts = options or RenderOptions()
    https = opts.extender_url.startswith("https://")
    if opts.extender_client_cert_dir and not https:
        raise KgweError("an extender client certificate needs an https:// extender URL")
    cert_dir = extender_client_cert_dir(opts.extender_url, opts.extender_client_cert_dir)
    inventory = inventory if inventory is not None else ps.inventory()
    if layouts is None:
        layouts = desired_layouts(ps.mig_strategies, inventory) if inventory is not None else {}
    node_layouts: NodeLayouts = {
        n: [None if g is None else list(g) for g in gpus] for n, gpus in layouts.items()
    }
    mig_configs, node_configs = _build_mig_configs(node_layouts)
    for name, entries in {**OPERATOR_DEFAULT_CONFIGS, **(keep_mig_configs or {})}.items():
        mig_configs.setdefault(name, entries)

    scoring_default, scoring_profiles = _scoring_payload(ps)
    default_profile = scoring_profiles[scoring_default]
    extender = default_profile["extender"]
    common = {"repository": opts.repository, "repository_label": REPOSITORY_LABEL, "revision": opts.revision}

    files: dict[str, str] = {}
    config_text = render_template("mig-parted-config.yaml.j2", mig_configs=mig_configs)
    files["mig-parted-config.yaml"] = render_template(
        "mig-parted-configmap.yaml.j2",
        name=opts.mig_config_name,
        namespace=opts.mig_namespace,
        config_text=config_text,
        **common,
    )
    scheduler_text = render_template(
        "kube-scheduler-config.yaml.j2",
        scheduler={
            "name": opts.scheduler_name,
            "kubeconfig": opts.scheduler_kubeconfig,
            "leader_elect": opts.scheduler_leader_elect,
            "lease_name": opts.scheduler_name,
            "lease_namespace": opts.namespace,
            "percentage_of_nodes_to_score": extender["percentageOfNodesToScore"],
        },
        extender={
            "url": opts.extender_url,
            "weight": extender["weight"],
            "https": https,
            "client_cert_dir": (cert_dir or "").rstrip("/") or None,
            "http_timeout": extender["httpTimeout"],
            "ignorable": extender["ignorable"],
        },
        managed_resources=_managed_resources(ps, node_layouts),
    )
    files["kube-scheduler-config.yaml"] = render_template(
        "scheduler-configmap.yaml.j2",
        name=SCHEDULER_CONFIGMAP,
        key=SCHEDULER_CONFIG_KEY,
        namespace=opts.namespace,
        config_text=scheduler_text,
        **common,
    )
    payload = {"default": scoring_default, "profiles": scoring_profiles}
    profiles_json = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2).decode() + "\n"
    files["scoring.yaml"] = render_template(
        "scoring-configmap.yaml.j2", namespace=opts.namespace, profiles_json=profiles_json, **common
    )
    runtimes = {r.name: r.spec.model_dump(mode="json", by_alias=True) for r in ps.runtimes}
    runtimes_json = orjson.dumps({"runtimes": runtimes}, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    files["runtimes.yaml"] = render_template(
        "runtimes-configmap.yaml.j2",
        name=RUNTIMES_CONFIGMAP,
        key=RUNTIMES_CONFIG_KEY,
        namespace=opts.namespace,
        runtimes_json=runtimes_json.decode() + "\n",
        **common,
    )
    files["pod-template-policy.yaml"] = render_template(
        "pod-template-policy-configmap.yaml.j2",
        name=POD_TEMPLATE_POLICY_CONFIGMAP,
        key=POD_TEMPLATE_POLICY_KEY,
        namespace=opts.namespace,
        policies_json=pod_template_policies_json(ps.objects(PodTemplatePolicy)),
        **common,
    )
    quotas = _quotas(ps, opts.namespace)
    if quotas:
        files["resource-quotas.yaml"] = render_template("resource-quotas.yaml.j2", quotas=quotas, **common)
    if node_configs:
        files["node-mig-labels.yaml"] = render_template(
            "node-mig-labels.yaml.j2", node_configs=node_configs, **common
        )
    sharing_configs: dict[str, str] = {}
    if ps.sharing_strategies or keep_sharing_configs:
        configs = device_plugin_configs(ps.sharing_strategies)
        for key, text in (keep_sharing_configs or {}).items():
            configs.setdefault(key, text)
        files["device-plugin-config.yaml"] = render_template(
            "device-plugin-configmap.yaml.j2",
            name=opts.device_plugin_config_name,
            namespace=opts.mig_namespace,
            configs=configs,
            **common,
        )
        nodes = [(n.name, n.labels) for n in inventory.spec.nodes] if inventory is not None else []
        shared = node_sharing(ps.sharing_strategies, nodes)
        sharing_configs = {node: config_key(strategy) for node, strategy in shared.items()}
        if sharing_configs:
            files["node-device-plugin-labels.yaml"] = render_template(
                "node-device-plugin-labels.yaml.j2", node_configs=sharing_configs, **common
            )

    objects: list[dict] = []
    for name, text in files.items():
        try:
            objects.extend(d for d in yaml.load_all(text, Loader=_Loader) if d)
        except yaml.YAMLError as exc:  # a template bug, never user input: say where
            raise KgweError(f"rendered {name} is not valid YAML: {exc}") from None
    return Rendered(
        files=files,
        objects=objects,
        layouts=node_layouts,
        node_configs=node_configs,
        sharing_configs=sharing_configs,
    )


def scheduler_config_text(objects: Sequence[Mapping]) -> str:
    """The KubeSchedulerConfiguration text of the rendered `kgwe-scheduler-config` ConfigMap."""
    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "ConfigMap" and meta.get("name") == SCHEDULER_CONFIGMAP:
            return obj["data"][SCHEDULER_CONFIG_KEY]
    raise KgweError(f"no ConfigMap {SCHEDULER_CONFIGMAP} among the rendered objects")


def render_repository(
    policy_set: PolicySet,
    inventory: GPUInventory | None = None,
    *,
    options: RenderOptions | None = None,
    layouts: Mapping[str, Sequence[Sequence[str] | None]] | None = None,
) -> list[dict]:
    """The desired Kubernetes objects (ConfigMaps, ResourceQuotas, Node label patches) as dicts."""
    return render(policy_set, inventory, options=options, layouts=layouts).objects
