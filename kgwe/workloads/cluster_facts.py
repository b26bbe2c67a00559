"""What the cluster has that decides whether a GPUWorkload can be admitted: the GPU nodes' offers,
PriorityClasses, the gang engines served, the namespaces' kgwe-budget quotas, which namespaces opted in and
hold the controller's RoleBinding, and the rendered policy (kgwe-scoring profiles, kgwe-runtimes,
kgwe-pod-template-policy). Read by the reconciler at admission and by `kgwe validate --cluster`, so both
judge a workload on the same facts (kgwe.policy.admission)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson
from kubernetes.client.exceptions import ApiException

from kgwe.gpu import catalog
from kgwe.policy.admission import ClusterView, PolicyView
from kgwe.policy.gpu_workload import NodeOffer
from kgwe.policy.kueue_setup import (
    KueueConfigError,
    KueueNamespace,
    KueueSetup,
    assumed_setup,
    parse_setup,
)
from kgwe.policy.pod_template_policy import PodTemplatePolicy, policies_from_json
from kgwe.policy.workload_runtime import WorkloadRuntimeSpec
from kgwe.quantity import count
from kgwe.runtime.cluster import Cluster
from kgwe.runtime.errors import NotServed, is_forbidden, is_not_found, status_of
from kgwe.runtime.kinds import (
    CONFIG_MAP,
    KUEUE_WORKLOAD,
    LOCAL_QUEUE,
    NAMESPACE,
    NODE,
    POD_GROUP,
    PRIORITY_CLASS,
    RESOURCE_QUOTA,
    ROLE_BINDING,
    Kind,
)
from kgwe.vocab import (
    BUDGET_QUOTA_NAME,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    KUEUE_CONFIG_KEY,
    KUEUE_CONFIGMAP,
    KUEUE_GROUP,
    KUEUE_NAMESPACE,
    MIG_RESOURCE_PREFIX,
    POD_TEMPLATE_POLICY_CONFIGMAP,
    POD_TEMPLATE_POLICY_KEY,
    RUNTIMES_CONFIG_KEY,
    RUNTIMES_CONFIGMAP,
    SCORING_CONFIG_KEY,
    SCORING_CONFIGMAP,
    WORKLOAD_ROLEBINDING,
)
from kgwe.workloads.namespaces import opted_in, ours

log = logging.getLogger(__name__)


def node_offers(cluster: Cluster) -> list[NodeOffer]:
    """What each GPU node can give one pod: allocatable GPUs, product, MIG profiles (those its GPU model
    could offer while MIG is not enabled yet)."""
    offers = []
    for node in cluster.list(NODE):
        labels = node["metadata"].get("labels") or {}
        alloc = (node.get("status") or {}).get("allocatable") or {}
        gpus = count(alloc.get(GPU_RESOURCE))
        profiles = frozenset(
            k[len(MIG_RESOURCE_PREFIX) :]
            for k, v in alloc.items()
            if k.startswith(MIG_RESOURCE_PREFIX) and count(v)
        )
        product = labels.get(GPU_PRODUCT_LABEL, "")
        if not profiles and product:
            model = catalog.model_for_product(product)
            if model is not None and model.mig_capable:
                profiles = frozenset(model.profiles)
        if gpus or profiles:
            offers.append(NodeOffer(gpus=gpus, product=product, mig_profiles=profiles))
    return offers


def priority_classes(cluster: Cluster) -> dict[str, int]:
    return {i["metadata"]["name"]: int(i.get("value", 0)) for i in cluster.list(PRIORITY_CLASS)}


def budget_quota(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    """The namespace's kgwe-budget ResourceQuota (spec and status), or None."""
    return cluster.get(RESOURCE_QUOTA, BUDGET_QUOTA_NAME, namespace)


def _config_map_json(cluster: Cluster, namespace: str, name: str, key: str) -> object:
    try:
        cm = cluster.get(CONFIG_MAP, name, namespace)
    except ApiException:
        return None
    try:  # orjson: nesting bounded (1,024 levels), where json.loads raises RecursionError
        return orjson.loads(((cm or {}).get("data") or {}).get(key) or "null")
    except orjson.JSONDecodeError:
        return None


def scoring_profiles(cluster: Cluster, policy_namespace: str) -> dict[str, str]:
    """Scoring profile name -> strategy, from the rendered kgwe-scoring ConfigMap."""
    from kgwe.extender.profile import ProfileError, profiles_from_document

    doc = _config_map_json(cluster, policy_namespace, SCORING_CONFIGMAP, SCORING_CONFIG_KEY)
    try:
        profiles = profiles_from_document(doc or {})
    except (ProfileError, ValueError, TypeError):
        return {}
    return {name: p.strategy for name, p in profiles.items()}


def runtimes(cluster: Cluster, policy_namespace: str) -> dict[str, WorkloadRuntimeSpec]:
    """The WorkloadRuntimes of the policy repository, from the rendered kgwe-runtimes ConfigMap (validated
    with the repository; one that no longer parses is left out)."""
    doc = _config_map_json(cluster, policy_namespace, RUNTIMES_CONFIGMAP, RUNTIMES_CONFIG_KEY)
    out: dict[str, WorkloadRuntimeSpec] = {}
    for name, spec in ((doc or {}).get("runtimes") or {}).items() if isinstance(doc, dict) else ():
        try:
            out[name] = WorkloadRuntimeSpec.model_validate(spec)
        except ValueError:
            continue
    return out


def template_policies(cluster: Cluster, policy_namespace: str) -> list[PodTemplatePolicy] | None:
    """The PodTemplatePolicies rendered from Git (kgwe-pod-template-policy): none while the ConfigMap is
    absent or not valid, so every field a policy could allow is refused; None (not known) when it may not
    be read."""
    try:
        cm = cluster.get(CONFIG_MAP, POD_TEMPLATE_POLICY_CONFIGMAP, policy_namespace)
    except ApiException as exc:
        if status_of(exc) in (401, 403):
            return None
        raise
    if cm is None:
        return []
    try:
        return policies_from_json((cm.get("data") or {}).get(POD_TEMPLATE_POLICY_KEY) or "[]")
    except ValueError as exc:
        log.warning(
            "%s is not valid; refusing what a policy would allow: %s", POD_TEMPLATE_POLICY_CONFIGMAP, exc
        )
        return []


def policy_view(cluster: Cluster, policy_namespace: str) -> PolicyView:
    return PolicyView(
        profiles=scoring_profiles(cluster, policy_namespace),
        runtimes=runtimes(cluster, policy_namespace),
        template_policies=template_policies(cluster, policy_namespace),
    )


def child_reader(cluster: Cluster) -> Callable[[str, str, str, str], dict[str, Any] | None]:
    """(namespace, apiVersion, kind, name) -> the metadata of the object of that name; None when there is
    none (or the caller may not read it, or the kind is not served: then nothing can be in the way)."""

    def read(namespace: str, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        try:
            found = cluster.get(Kind(api_version, kind), name, namespace)
        except NotServed:
            return None
        except ApiException as exc:
            if is_forbidden(exc) or is_not_found(exc):
                return None
            raise
        meta: dict[str, Any] | None = (found or {}).get("metadata") if found is not None else None
        return meta

    return read


def cluster_view(cluster: Cluster, *, namespaces_and_quotas: bool = False) -> ClusterView:
    """The cluster's side of admission. `namespaces_and_quotas`: also which namespaces exist, have opted in
    and hold the controller's RoleBinding, and every namespace's kgwe-budget quota (`kgwe validate
    --cluster`; the reconciler knows the opted-in namespaces from its watch and reads one quota)."""
    existing = enabled = bound = None
    quotas: dict[str, dict[str, Any]] | None = {}
    kueue = cluster.serves(KUEUE_GROUP)
    kueue_here: dict[str, KueueNamespace] | None = None
    if namespaces_and_quotas:  # a user who may not list them all gets them as not known
        try:
            listed = cluster.list(NAMESPACE)
            existing = frozenset(n["metadata"]["name"] for n in listed)
            enabled = frozenset(n["metadata"]["name"] for n in listed if opted_in(n))
            if kueue:  # (LocalQueues a user may not list: Kueue's view not known, as the namespaces')
                setup, queues = kueue_setup(cluster), local_queues(cluster)
                kueue_here = {
                    n["metadata"]["name"]: KueueNamespace(
                        namespace=n["metadata"]["name"],
                        setup=setup,
                        labels=n["metadata"].get("labels") or {},
                        local_queues=queues.get(n["metadata"]["name"], frozenset()),
                    )
                    for n in listed
                }
        except ApiException as exc:
            if not is_forbidden(exc):
                raise
        bound = workload_bindings(cluster)
        try:
            items = cluster.list(RESOURCE_QUOTA, fields=f"metadata.name={BUDGET_QUOTA_NAME}")
            quotas = {q["metadata"]["namespace"]: q for q in items}
        except ApiException as exc:
            if not is_forbidden(exc):
                raise
            quotas = None
    return ClusterView(
        offers=node_offers(cluster),
        priority_classes=priority_classes(cluster),
        native_gang=cluster.serves(POD_GROUP.group, POD_GROUP.version),
        kueue=kueue,
        kueue_namespaces=kueue_here,
        quotas=quotas,
        namespaces=existing,
        enabled_namespaces=enabled,
        bound_namespaces=bound,
        read_child=child_reader(cluster),
    )


def kueue_setup(cluster: Cluster, config: tuple[str, str] = (KUEUE_NAMESPACE, KUEUE_CONFIGMAP)) -> KueueSetup:
    """Kueue's Configuration from its ConfigMap (`config`: namespace, name); when it may not be read or does
    not parse, what Kueue's manifests ship, with the reason in its `source` (messages say it)."""
    namespace, name = config
    where = f"ConfigMap {namespace}/{name}"
    try:
        cm = cluster.get(CONFIG_MAP, name, namespace)
    except ApiException as exc:
        return assumed_setup(f"{where} not readable ({exc.status} {exc.reason})", namespace)
    if cm is None:
        return assumed_setup(f"{where} not found", namespace)
    text = (cm.get("data") or {}).get(KUEUE_CONFIG_KEY)
    if text is None:
        return assumed_setup(f"{where} has no {KUEUE_CONFIG_KEY}", namespace)
    try:
        return parse_setup(text, namespace, where)
    except KueueConfigError as exc:
        return assumed_setup(str(exc), namespace)


def local_queues(cluster: Cluster, namespace: str | None = None) -> dict[str, frozenset[str]]:
    """namespace -> the names of its Kueue LocalQueues (one namespace, or all)."""
    out: dict[str, set[str]] = {}
    for item in cluster.list(LOCAL_QUEUE, namespace):
        meta = item.get("metadata") or {}
        out.setdefault(meta.get("namespace") or "", set()).add(meta.get("name") or "")
    return {ns: frozenset(names) for ns, names in out.items()}


def kueue_namespace(cluster: Cluster, namespace: str, setup: KueueSetup) -> KueueNamespace:
    """How Kueue would treat KGWE's children in `namespace`: its labels and LocalQueues, read now."""
    listed = cluster.list(NAMESPACE, fields=f"metadata.name={namespace}")  # (the controller may list them)
    labels = (listed[0]["metadata"].get("labels") or {}) if listed else {}
    queues = local_queues(cluster, namespace).get(namespace, frozenset())
    return KueueNamespace(namespace=namespace, setup=setup, labels=labels, local_queues=queues)


def kueue_workload(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The Kueue Workload `name` (a pod group's has the group's name), or None."""
    return cluster.get(KUEUE_WORKLOAD, name, namespace)


def workload_bindings(cluster: Cluster) -> frozenset[str] | None:
    """Namespaces holding the controller's RoleBinding (kgwe.workloads.namespaces); None when they may not
    be listed."""
    try:
        items = cluster.list(ROLE_BINDING, fields=f"metadata.name={WORKLOAD_ROLEBINDING}")
    except ApiException as exc:
        if not is_forbidden(exc):
            raise
        return None
    return frozenset(rb["metadata"]["namespace"] for rb in items if ours(rb["metadata"].get("labels")))
