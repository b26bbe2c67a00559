"""Every reason a GPUWorkload is refused, and the one check that finds them (pure).

The controller runs `findings()` with what it read from the cluster and refuses the workload with the first
error; `kgwe validate` runs the same function with what the policy repository says (and, with `--cluster`,
what the cluster says), so whatever the repository alone can tell fails at validation, not minutes later on
the cluster. `REFUSALS` lists each reason with what it depends on:

- spec: the manifest alone (found by `kgwe validate FILE`)
- repository: the policy repository (scoring profiles, runtimes, budgets, PodTemplatePolicies: `kgwe validate
  --policy DIR FILE`, or a repository holding both)
- cluster: what only the cluster has (PriorityClasses, nodes, gang engines, the namespaces' opt-in label): a
  warning offline where it can be foreseen, an error with `kgwe validate --cluster`
- state: the cluster's state at admission time (a budget used up, the controller's RoleBinding in a
  namespace not written yet): a warning with `--cluster`
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kgwe.policy import runtime_templates as rt
from kgwe.policy import template_admission
from kgwe.policy.diagnostics import format_path
from kgwe.policy.gpu_workload import GPUWorkload, NodeOffer, has_containers, problems
from kgwe.policy.kueue_setup import KueueNamespace
from kgwe.policy.pod_template import template_findings
from kgwe.policy.pod_template_policy import PodTemplatePolicy
from kgwe.policy.quota_namespaces import protected_namespace
from kgwe.policy.workload_resolution import (
    Facts,
    PlanError,
    child_refs,
    child_write,
    gpu_resources,
    name_problem,
    resolve_backend,
    resolve_priority,
    resolve_profile,
)
from kgwe.policy.workload_runtime import WorkloadRuntimeSpec
from kgwe.quantity import parse_quantity
from kgwe.vocab import (
    BUDGET_ANNOTATION,
    DEFAULT_STRATEGY,
    KGWE_NAMESPACE,
    WORKLOAD_ROLEBINDING,
    WORKLOADS_ENABLED,
    WORKLOADS_NAMESPACE_LABEL,
    quota_key,
)

Scope = Literal["spec", "repository", "cluster", "state"]
Severity = Literal["error", "warning"]
FieldPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Refusal:
    scope: Scope
    meaning: str


REFUSALS: dict[str, Refusal] = {
    "InvalidSpec": Refusal("spec", "the object fails the GPUWorkload schema (types, ranges, consistency)"),
    "NameTooLong": Refusal("spec", "pod hostnames <workload>-r<run>-<role>-<index> exceed 63 characters"),
    "NoRuntime": Refusal("repository", "a role has no containers and no WorkloadRuntime supplies them"),
    "InvalidPodTemplate": Refusal(
        "repository", "the pod template (with its runtime's) is not one the API server accepts for a Job"
    ),
    "NoScoringProfile": Refusal("repository", "no ScoringProfile uses the schedulingStrategy asked for"),
    "QuotaExceeded": Refusal("repository", "the namespace's GPUBudget quota is smaller than the workload"),
    "Unschedulable": Refusal("cluster", "no node offers what one pod needs (GPUs, product, MIG profile)"),
    "NoGangEngine": Refusal(
        "cluster",
        "several pods and no gang engine to admit them whole (native PodGroups, or Kueue configured to "
        "manage the pods), or Kueue takes every Job of the namespace and cannot admit the pods as one group",
    ),
    "BudgetCountedTwice": Refusal(
        "cluster",
        "Kueue admits the workload (its ClusterQueue counts the GPUs) and the namespace's GPUBudget quota "
        "counts the same GPUs",
    ),
    "NoPriorityClass": Refusal("cluster", "spec.priority names a PriorityClass the cluster does not have"),
    "TemplateNotAllowed": Refusal(
        "repository",
        "a pod template (with its runtime's) sets what the namespace's PodTemplatePolicy refuses",
    ),
    "NamespaceNotEnabled": Refusal(
        "cluster", "the namespace has not opted in to GPUWorkloads, or is Kubernetes' or KGWE's own"
    ),
    "BudgetExhausted": Refusal("state", "an Enforce budget is used up: its quota is capped at current use"),
    "ChildNameTaken": Refusal(
        "cluster",
        "an object of a child's name exists that this GPUWorkload does not control: never taken over",
    ),
    "Forbidden": Refusal(
        "state",
        "the API server refuses the controller's objects: its RoleBinding there not written yet, or gone",
    ),
}
MAX_SAID = 3  # findings of the refusal's reason in the controller's condition message; the rest are counted


@dataclass(frozen=True)
class Finding:
    reason: str
    path: FieldPath
    message: str
    severity: Severity = "error"


@dataclass(frozen=True)
class PolicyView:
    """What the policy repository says; None where it is not known (a manifest validated on its own)."""

    profiles: Mapping[str, str] | None = None  # ScoringProfile name -> strategy, as rendered (kgwe-scoring)
    runtimes: Mapping[str, WorkloadRuntimeSpec] | None = None  # as rendered (kgwe-runtimes)
    budget_quotas: Mapping[str, tuple[str, Mapping[str, str]]] | None = None  # namespace -> (budget, hard)
    template_policies: Sequence[PodTemplatePolicy] | None = None  # as rendered (kgwe-pod-template-policy)


@dataclass(frozen=True)
class ClusterView:
    """What the cluster has; None where it is not known. `offers` may come from a GPUInventory offline."""

    offers: Sequence[NodeOffer] | None = None
    offers_from: str = "the cluster's nodes"
    priority_classes: Mapping[str, int] | None = None
    native_gang: bool | None = None
    kueue: bool | None = None
    quotas: Mapping[str, Mapping[str, Any]] | None = None  # namespace -> its live kgwe-budget quota
    kueue_namespaces: Mapping[str, KueueNamespace] | None = None  # how Kueue treats each namespace
    namespaces: frozenset[str] | None = None
    enabled_namespaces: Collection[str] | None = None  # labelled WORKLOADS_NAMESPACE_LABEL=enabled
    bound_namespaces: Collection[str] | None = (
        None  # holding the controller's RoleBinding WORKLOAD_ROLEBINDING
    )
    kgwe_namespace: str = KGWE_NAMESPACE  # where KGWE runs (no GPUWorkload does)
    # (namespace, apiVersion, kind, name) -> that object's metadata, None when absent (or not readable)
    read_child: Callable[[str, str, str, str], Mapping[str, Any] | None] | None = None


def profiles_of(profiles: Mapping[str, str]) -> dict[str, str]:
    """Profile name -> strategy as the extender will have them: with no ScoringProfile in the repository,
    `kgwe render` writes one "default" profile with the default strategy."""
    return dict(profiles) if profiles else {"default": DEFAULT_STRATEGY}


def quota_needs(wl: GPUWorkload) -> dict[str, int]:
    """ResourceQuota keys -> what all the workload's pods request together."""
    needs: dict[str, int] = {}
    for role in wl.spec.effective_roles():
        assert role.gpu_requirements is not None
        resources, _ = gpu_resources(role.gpu_requirements)
        for key, n in resources.items():
            needs[quota_key(key)] = needs.get(quota_key(key), 0) + n * role.replicas
    return needs


def template_problems(wl: GPUWorkload, runtimes: Mapping[str, WorkloadRuntimeSpec] | None) -> list[Finding]:
    """NoRuntime / InvalidPodTemplate: the template each role's pods are made from. Runtimes unknown: a
    warning for roles that need one."""
    name, why = rt.select(wl, runtimes or {})
    if runtimes is None and rt.needs_runtime(wl):
        wants = f'runtime "{wl.spec.runtime}"' if wl.spec.runtime else f"framework {wl.spec.framework}"
        return [
            Finding(
                "NoRuntime",
                ("spec", "podTemplate"),
                "the pod template has no containers: the controller takes them from the WorkloadRuntime "
                f"for {wants} and workloadType {wl.spec.workload_type}; --policy DIR checks one exists",
                "warning",
            )
        ]
    if why:
        path: FieldPath = (
            ("spec", "runtime")
            if wl.spec.runtime
            else ("spec", "framework")
            if wl.spec.framework
            else ("spec", "podTemplate")
        )
        return [Finding("NoRuntime", path, why)]
    runtime = (runtimes or {}).get(name) if name else None
    out: list[Finding] = []
    for i, role in enumerate(wl.spec.effective_roles()):
        template = rt.role_template(role.pod_template, runtime)
        base = rt.template_path(wl, i)
        via = f" (with WorkloadRuntime {name})" if name and not has_containers(role.pod_template) else ""
        for path, message in template_findings(template, require_containers=True):
            out.append(Finding("InvalidPodTemplate", (*base, *path), message + via))
    return out


def findings(
    wl: GPUWorkload, namespace: str | None, policy: PolicyView, cluster: ClusterView
) -> list[Finding]:
    """Everything that would make the controller refuse `wl` (errors), and what cannot be known from the
    views given (warnings), in the order the controller meets them."""
    spec = wl.spec
    out: list[Finding] = []
    if namespace:
        out += _namespace(namespace, cluster)
    if wl.name:
        too_long = name_problem(wl, 0)
        if too_long:
            out.append(Finding("NameTooLong", ("metadata", "name"), too_long))
    out += template_problems(wl, policy.runtimes)
    name, _ = rt.select(wl, policy.runtimes or {})
    runtime = (policy.runtimes or {}).get(name) if name else None
    if isinstance(spec.priority, str):
        priority_class: str | None = spec.priority
    elif cluster.priority_classes is not None:  # an integer: the class it resolves to on the cluster
        priority_class = resolve_priority(spec.priority, cluster.priority_classes)
    else:
        priority_class = None
    out += not_allowed(wl, namespace, policy.template_policies, name, runtime, priority_class)
    if cluster.offers is not None:
        for path, message in problems(spec, cluster.offers):
            out.append(Finding("Unschedulable", path, f"{message} (checked against {cluster.offers_from})"))
    else:
        for i, role in enumerate(spec.roles or []):
            if role.gpu_requirements and role.gpu_requirements.product:
                out.append(
                    _unknown_product(("spec", "roles", i, "gpuRequirements"), role.gpu_requirements.product)
                )
        if spec.gpu_requirements.product:
            out.append(_unknown_product(("spec", "gpuRequirements"), spec.gpu_requirements.product))
    backend = None
    if cluster.native_gang is not None and cluster.kueue is not None:
        here = kueue_here(cluster, namespace)
        backend, problem = resolve_backend(
            spec.gang.backend,
            spec.total_pods,
            cluster.native_gang,
            cluster.kueue,
            spec.is_batch,
            here,
            spec.gang.queue_name,
        )
        if problem:
            takes_jobs = here is not None and here.takes_every_job()
            hint = "" if takes_jobs else "; set spec.gang.backend: None to run without all-or-nothing"
            out.append(Finding("NoGangEngine", ("spec", "gang", "backend"), problem + hint))
    if spec.scheduling_strategy and policy.profiles is None:
        message = (
            f"needs a ScoringProfile with strategy {spec.scheduling_strategy} in the policy repository "
            "(not known without one; --policy DIR checks)"
        )
        out.append(Finding("NoScoringProfile", ("spec", "schedulingStrategy"), message, "warning"))
    elif spec.scheduling_strategy and policy.profiles is not None:
        try:
            resolve_profile(wl, profiles_of(policy.profiles))
        except PlanError as exc:
            out.append(Finding(exc.reason, ("spec", "schedulingStrategy"), str(exc)))
    if isinstance(spec.priority, str):
        if cluster.priority_classes is None:
            out.append(
                Finding(
                    "NoPriorityClass",
                    ("spec", "priority"),
                    f'needs PriorityClass "{spec.priority}" on the cluster (not known offline; `kgwe '
                    f"validate --cluster` checks): kubectl create priorityclass {spec.priority} --value=N",
                    "warning",
                )
            )
        else:
            try:
                resolve_priority(spec.priority, cluster.priority_classes)
            except PlanError as exc:
                known = ", ".join(sorted(cluster.priority_classes)) or "none"
                out.append(Finding(exc.reason, ("spec", "priority"), f"{exc} on the cluster (have: {known})"))
    out += _quota(wl, namespace, policy, cluster)
    if backend == "Kueue":
        out += _counted_twice(wl, namespace, policy, cluster)
    if namespace and wl.name and cluster.read_child is not None:
        native = backend == "Native" if backend is not None else bool(cluster.native_gang)
        out += names_taken(wl, namespace, cluster.read_child, native, kueue=backend == "Kueue")
    return out


def names_taken(
    wl: GPUWorkload,
    namespace: str,
    read_child: Callable[[str, str, str, str], Mapping[str, Any] | None],
    native_gang: bool,
    run: int = 0,
    uid: str | None = None,
    kueue: bool = False,
) -> list[Finding]:
    """ChildNameTaken: a child's name is held by an object this workload does not control (by `uid` when
    known; by name for a manifest not created yet)."""
    out = []
    for api_version, kind, name in child_refs(wl, run, native_gang, kueue):
        verdict = child_write(read_child(namespace, api_version, kind, name), f"{kind}/{name}", wl.name, uid)
        if verdict.action == "refuse":
            out.append(Finding("ChildNameTaken", ("metadata", "name"), verdict.why))
    return out


def kueue_here(cluster: ClusterView, namespace: str | None) -> KueueNamespace | None:
    """How Kueue treats `namespace`, when known."""
    return (cluster.kueue_namespaces or {}).get(namespace or "") if cluster.kueue else None


def _counted_twice(
    wl: GPUWorkload, namespace: str | None, policy: PolicyView, cluster: ClusterView
) -> list[Finding]:
    """BudgetCountedTwice: the Kueue route, and a kgwe-budget quota on the GPUs the workload asks for. One
    budget counts a namespace's GPUs: Kueue's ClusterQueue where Kueue admits GPUWorkloads, KGWE's
    GPUBudget quota elsewhere (docs/spec/gpuworkload.md, "Kueue")."""
    needs = quota_needs(wl)
    live = (cluster.quotas or {}).get(namespace or "")
    if live:
        hard = (live.get("spec") or {}).get("hard") or {}
        budget = ((live.get("metadata") or {}).get("annotations") or {}).get(BUDGET_ANNOTATION) or "?"
    elif namespace and policy.budget_quotas is not None and namespace in policy.budget_quotas:
        budget, hard = policy.budget_quotas[namespace]
    else:
        return []
    counted = sorted(key for key in needs if key in hard)
    if not counted:
        return []
    message = (
        f"Kueue admits this workload and its ClusterQueue counts its GPUs, and GPUBudget {budget} counts "
        f"{', '.join(counted)} in namespace {namespace} too (its kgwe-budget ResourceQuota): one budget must "
        f"count them — remove spec.quota from GPUBudget {budget} (its limit and alerts stay) where Kueue "
        "admits GPUWorkloads, or keep the namespace out of Kueue"
    )
    return [Finding("BudgetCountedTwice", ("spec", "gpuRequirements"), message)]


def namespace_refusal(
    namespace: str, enabled: Collection[str] | None, kgwe_namespace: str = KGWE_NAMESPACE
) -> str | None:
    """Why no GPUWorkload may run in `namespace`: never in Kubernetes' or KGWE's own, elsewhere not before
    an administrator labels it. None when it may, or when which namespaces opted in is not known."""
    protected = protected_namespace(namespace, kgwe_namespace)
    if protected:
        return f"{protected}: KGWE runs no GPUWorkloads there"
    if enabled is None or namespace in enabled:
        return None
    return (
        f'namespace "{namespace}" has not opted in to GPUWorkloads '
        f"(an administrator labels it {WORKLOADS_NAMESPACE_LABEL}={WORKLOADS_ENABLED})"
    )


def _namespace(namespace: str, cluster: ClusterView) -> list[Finding]:
    """The namespace exists, has opted in (errors), and the controller may write there now (a warning).
    Offline only Kubernetes' and KGWE's own namespaces are known to be refused: whether another opted in is
    a label on the cluster that nothing in a manifest or a repository foretells."""
    path: FieldPath = ("metadata", "namespace")
    if cluster.namespaces is not None and namespace not in cluster.namespaces:
        message = f'namespace "{namespace}" does not exist: the API server refuses the GPUWorkload'
        return [Finding("", path, message)]
    refused = namespace_refusal(namespace, cluster.enabled_namespaces, cluster.kgwe_namespace)
    if refused:
        return [Finding("NamespaceNotEnabled", path, refused)]
    if cluster.bound_namespaces is not None and namespace not in cluster.bound_namespaces:
        message = (
            f'the controller\'s RoleBinding {WORKLOAD_ROLEBINDING} is not in namespace "{namespace}" yet '
            "(the controller writes it once it sees the opt-in label): the API server refuses its Jobs "
            "until then; admission waits"
        )
        return [Finding("Forbidden", path, message, "warning")]
    return []


def not_allowed(
    wl: GPUWorkload,
    namespace: str | None,
    policies: Sequence[PodTemplatePolicy] | None,
    runtime_name: str | None,
    runtime: WorkloadRuntimeSpec | None,
    priority_class: str | None,
) -> list[Finding]:
    """TemplateNotAllowed: what the pods' templates set that the namespace's PodTemplatePolicy does not allow
    (kgwe.policy.template_admission). Errors where the policies are known, the repository's or the
    cluster's (none at all: everything a policy could allow is refused); warnings where they are not (a
    manifest checked on its own, whose namespace's policy may allow it)."""
    severity: Severity = "warning" if policies is None else "error"
    found = template_admission.violations(
        wl, namespace, policies or (), runtime_name, runtime, priority_class
    )
    return [Finding("TemplateNotAllowed", path, message, severity) for path, message in found]


def refusal(found: Sequence[Finding]) -> tuple[str, str] | None:
    """What the controller refuses with: the first error's reason, said with up to MAX_SAID errors of that
    reason at their fields (the rest counted). None when nothing is an error."""
    errors = [f for f in found if f.severity == "error"]
    if not errors:
        return None
    reason = errors[0].reason
    said = [f"{format_path(f.path)}: {f.message}" for f in errors if f.reason == reason]
    more = f" (and {len(said) - MAX_SAID} more)" if len(said) > MAX_SAID else ""
    return reason, "; ".join(said[:MAX_SAID]) + more


def quota_admission(quota: Mapping[str, Any] | None, needs: Mapping[str, int]) -> tuple[str, str] | None:
    """(reason, message) when the namespace's kgwe-budget ResourceQuota cannot take the workload, else None.

    `needs`: quota keys (requests.nvidia.com/gpu, ...) -> total the workload's pods request. An `Enforce`
    budget that is exhausted caps the quota at current use: no headroom at all -> BudgetExhausted."""
    if not quota:
        return None
    hard = (quota.get("spec") or {}).get("hard") or {}
    used = (quota.get("status") or {}).get("used") or {}
    budget = ((quota.get("metadata") or {}).get("annotations") or {}).get(BUDGET_ANNOTATION) or "?"
    for key, need in sorted(needs.items()):
        if key not in hard:
            continue
        limit, in_use = _qty(hard[key]), _qty(used.get(key, "0"))
        if in_use + need > limit:
            reason = "BudgetExhausted" if in_use >= limit else "QuotaExceeded"
            what = "exhausted: capped at current use" if reason == "BudgetExhausted" else "quota too small"
            return reason, (
                f"GPUBudget {budget} ({what}): {key} hard {limit}, used {in_use}, this workload needs {need}"
            )
    return None


def _qty(value: object) -> int:
    """A quota amount (the API server wrote it: always a quantity); whole GPUs, rounded down."""
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_FLOOR"))


def _unknown_product(path: FieldPath, product: str) -> Finding:
    return Finding(
        "Unschedulable",
        (*path, "product"),
        f'needs a node with GPU product "{product}": not known offline (add a GPUInventory to the '
        "repository, or `kgwe validate --cluster`)",
        "warning",
    )


def _quota(wl: GPUWorkload, namespace: str | None, policy: PolicyView, cluster: ClusterView) -> list[Finding]:
    needs = quota_needs(wl)
    out: list[Finding] = []
    if namespace and policy.budget_quotas is not None and namespace in policy.budget_quotas:
        budget, hard = policy.budget_quotas[namespace]
        rendered = {
            "spec": {"hard": dict(hard)},
            "metadata": {"annotations": {BUDGET_ANNOTATION: budget}},
        }
        refused = quota_admission(rendered, needs)
        if refused:  # more than the whole quota: no amount of waiting admits it
            out.append(
                Finding("QuotaExceeded", ("spec", "gpuRequirements"), f"{refused[1]} (namespace {namespace})")
            )
    live = (cluster.quotas or {}).get(namespace or "")
    if live:
        refused = quota_admission(live, needs)
        if refused:  # the state of the moment: the controller waits and admits when room appears
            reason, message = refused
            out.append(Finding(reason, ("spec", "gpuRequirements"), f"{message}; admission waits", "warning"))
    return out


def resolve_facts(
    wl: GPUWorkload,
    run: int,
    policy: PolicyView,
    cluster: ClusterView,
    *,
    native: bool,
    kueue: bool,
    here: KueueNamespace | None = None,
) -> Facts:
    """The facts the children are planned with, once `findings` has no error. `native`/`kueue` say which
    gang engines to assume (the controller passes what the cluster serves), `here` how Kueue treats the
    workload's namespace."""
    spec = wl.spec
    backend, problem = resolve_backend(
        spec.gang.backend, spec.total_pods, native, kueue, spec.is_batch, here, spec.gang.queue_name
    )
    if problem:
        raise PlanError("NoGangEngine", problem)
    name, why = rt.select(wl, policy.runtimes or {})
    if why:
        raise PlanError("NoRuntime", why)
    if cluster.priority_classes is not None:
        priority_class = resolve_priority(spec.priority, cluster.priority_classes)
    else:  # offline: a name is taken as written; an integer is resolved against the cluster's classes
        priority_class = spec.priority if isinstance(spec.priority, str) else None
    return Facts(
        run=run,
        gang_backend=backend,
        # profiles not known (offline, no repository): only a profile named outright
        scoring_profile=(
            resolve_profile(wl, profiles_of(policy.profiles))
            if policy.profiles is not None
            else spec.scoring_profile
        ),
        priority_class=priority_class,
        runtime_name=name,
        runtime=(policy.runtimes or {}).get(name) if name else None,
    )
