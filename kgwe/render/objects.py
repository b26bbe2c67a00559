"""One function per rendered file: each renders its template (templates/) and parses the text back, so
the objects are exactly what the file says. Pure: policy, plan and options in, text and objects out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import yaml

from kgwe.errors import KgweError
from kgwe.policy.loader import PolicySet
from kgwe.policy.models import PodTemplatePolicy, ScoringProfile, ScoringProfileSpec
from kgwe.policy.pod_template_policy import pod_template_policies_json
from kgwe.policy.quota_namespaces import refused_quota_namespace
from kgwe.render.environment import FAST_SAFE_LOADER, render_template
from kgwe.render.layouts import NodeLayouts
from kgwe.render.options import MigConfigs, QuotaCaps, RenderOptions, extender_client_cert_dir
from kgwe.vocab import (
    BUDGET_ANNOTATION,
    GPU_RESOURCE,
    POD_TEMPLATE_POLICY_CONFIGMAP,
    POD_TEMPLATE_POLICY_KEY,
    REPOSITORY_LABEL,
    RUNTIMES_CONFIG_KEY,
    RUNTIMES_CONFIGMAP,
    SCHEDULER_CONFIG_KEY,
    SCHEDULER_CONFIGMAP,
    SHARED_GPU_RESOURCE,
    TEAM_LABEL,
    UNCAPPED_HARD_ANNOTATION,
    mig_resource,
)

SCHEDULER_CONFIG_FILE = "kube-scheduler-config.yaml"  # the rendered file of the KGWE scheduler's ConfigMap


def _managed_resources(ps: PolicySet, layouts: NodeLayouts) -> list[dict[str, Any]]:
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


def _scoring_payload(ps: PolicySet) -> tuple[str, dict[str, Any]]:
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


def uncapped_hard_text(hard: Mapping[str, str]) -> str:
    """A budget quota's own `spec.hard` as the UNCAPPED_HARD_ANNOTATION of its capped ResourceQuota."""
    return orjson.dumps(dict(hard), option=orjson.OPT_SORT_KEYS).decode()


def _quotas(ps: PolicySet, kgwe_namespace: str, caps: QuotaCaps) -> list[dict[str, Any]]:
    """One ResourceQuota per budgeted namespace, its `hard` capped where `caps` names the namespace;
    never in kube-* or KGWE's own namespace."""
    quotas = []
    for budget in sorted(ps.budgets, key=lambda b: b.name):
        hard = budget.spec.quota_hard()
        if not hard:
            continue
        for ns in budget.spec.namespaces:
            refused = refused_quota_namespace(ns, kgwe_namespace)
            if refused:
                raise KgweError(f"GPUBudget/{budget.name}: {refused}")
            annotations = {BUDGET_ANNOTATION: budget.name, TEAM_LABEL: budget.spec.team}
            if ns in caps:  # the budget's own limit rides along, so the cap can be lifted from the cluster
                annotations[UNCAPPED_HARD_ANNOTATION] = uncapped_hard_text(hard)
            capped = dict(caps[ns]) if ns in caps else hard
            quotas.append({"namespace": ns, "annotations": annotations, "hard": capped})
    return sorted(quotas, key=lambda q: q["namespace"])


@dataclass(frozen=True)
class RenderedFile:
    """One rendered file and the objects it holds (parsed back from the text, so they are what it says)."""

    name: str
    text: str
    objects: list[dict[str, Any]]

    @classmethod
    def of(cls, file: str, template: str, /, **context: object) -> RenderedFile:
        text = render_template(template, **context)
        try:
            objects = [d for d in yaml.load_all(text, Loader=FAST_SAFE_LOADER) if d]
        except yaml.YAMLError as exc:  # a template bug, never user input: say where
            raise KgweError(f"rendered {file} is not valid YAML: {exc}") from None
        return cls(file, text, objects)


def _common(opts: RenderOptions) -> dict[str, Any]:
    """What every object's metadata carries (templates/_metadata.j2)."""
    return {"repository": opts.repository, "repository_label": REPOSITORY_LABEL, "revision": opts.revision}


def check_options(opts: RenderOptions) -> None:
    if opts.extender_client_cert_dir and not opts.extender_url.startswith("https://"):
        raise KgweError("an extender client certificate needs an https:// extender URL")


def mig_parted_configmap(mig_configs: MigConfigs, opts: RenderOptions) -> RenderedFile:
    """The mig-parted config the GPU Operator's MIG manager reads (planned configs plus the kept ones)."""
    config_text = render_template("mig-parted-config.yaml.j2", mig_configs=mig_configs)
    return RenderedFile.of(
        "mig-parted-config.yaml",
        "mig-parted-configmap.yaml.j2",
        name=opts.mig_config_name,
        namespace=opts.mig_namespace,
        config_text=config_text,
        **_common(opts),
    )


def scheduler_configmap(ps: PolicySet, layouts: NodeLayouts, opts: RenderOptions) -> RenderedFile:
    """The KubeSchedulerConfiguration of the KGWE scheduler, calling the extender."""
    default, profiles = _scoring_payload(ps)
    extender = profiles[default]["extender"]
    https = opts.extender_url.startswith("https://")
    cert_dir = extender_client_cert_dir(opts.extender_url, opts.extender_client_cert_dir)
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
        managed_resources=_managed_resources(ps, layouts),
    )
    return RenderedFile.of(
        SCHEDULER_CONFIG_FILE,
        "scheduler-configmap.yaml.j2",
        name=SCHEDULER_CONFIGMAP,
        key=SCHEDULER_CONFIG_KEY,
        namespace=opts.namespace,
        config_text=scheduler_text,
        **_common(opts),
    )


def scoring_configmap(ps: PolicySet, opts: RenderOptions) -> RenderedFile:
    """The ScoringProfiles as JSON, for `kgwe extender`."""
    default, profiles = _scoring_payload(ps)
    payload = {"default": default, "profiles": profiles}
    profiles_json = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2).decode() + "\n"
    return RenderedFile.of(
        "scoring.yaml",
        "scoring-configmap.yaml.j2",
        namespace=opts.namespace,
        profiles_json=profiles_json,
        **_common(opts),
    )


def runtimes_configmap(ps: PolicySet, opts: RenderOptions) -> RenderedFile:
    """The WorkloadRuntimes as JSON, for the GPUWorkload reconciler (rendered when there are none too)."""
    runtimes = {r.name: r.spec.model_dump(mode="json", by_alias=True) for r in ps.runtimes}
    runtimes_json = orjson.dumps({"runtimes": runtimes}, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    return RenderedFile.of(
        "runtimes.yaml",
        "runtimes-configmap.yaml.j2",
        name=RUNTIMES_CONFIGMAP,
        key=RUNTIMES_CONFIG_KEY,
        namespace=opts.namespace,
        runtimes_json=runtimes_json.decode() + "\n",
        **_common(opts),
    )


def pod_template_policy_configmap(ps: PolicySet, opts: RenderOptions) -> RenderedFile:
    """The PodTemplatePolicies as JSON, for the GPUWorkload controller before it creates a run's pods."""
    return RenderedFile.of(
        "pod-template-policy.yaml",
        "pod-template-policy-configmap.yaml.j2",
        name=POD_TEMPLATE_POLICY_CONFIGMAP,
        key=POD_TEMPLATE_POLICY_KEY,
        namespace=opts.namespace,
        policies_json=pod_template_policies_json(ps.objects(PodTemplatePolicy)),
        **_common(opts),
    )


def budget_quotas(ps: PolicySet, opts: RenderOptions, caps: QuotaCaps | None = None) -> RenderedFile | None:
    """The `kgwe-budget` ResourceQuota of every budgeted namespace; `caps`: namespace -> `spec.hard` of an
    enforced budget (kgwe.cost.budgets.quota_decisions), in place of the budget's quota."""
    quotas = _quotas(ps, opts.namespace, caps or {})
    if not quotas:
        return None
    return RenderedFile.of("resource-quotas.yaml", "resource-quotas.yaml.j2", quotas=quotas, **_common(opts))


def node_mig_labels(node_configs: Mapping[str, str], opts: RenderOptions) -> RenderedFile | None:
    """One Node label patch per node naming its mig-parted config."""
    if not node_configs:
        return None
    return RenderedFile.of(
        "node-mig-labels.yaml", "node-mig-labels.yaml.j2", node_configs=node_configs, **_common(opts)
    )


def device_plugin_configmap(configs: Mapping[str, str], opts: RenderOptions) -> RenderedFile:
    """The device plugin's named configs (one per GPUSharingStrategy, plus `default` and the kept ones)."""
    return RenderedFile.of(
        "device-plugin-config.yaml",
        "device-plugin-configmap.yaml.j2",
        name=opts.device_plugin_config_name,
        namespace=opts.mig_namespace,
        configs=configs,
        **_common(opts),
    )


def node_sharing_labels(sharing_configs: Mapping[str, str], opts: RenderOptions) -> RenderedFile | None:
    """One Node label patch per shared node naming its device-plugin config."""
    if not sharing_configs:
        return None
    return RenderedFile.of(
        "node-device-plugin-labels.yaml",
        "node-device-plugin-labels.yaml.j2",
        node_configs=sharing_configs,
        **_common(opts),
    )
