"""The pod templates a GPUWorkload's pods get, judged by the PodTemplatePolicy of its namespace (pure).

`kgwe validate` and the controller both run this check, through kgwe.policy.admission, on each role's
template as its pods get it: the workload's own, or its WorkloadRuntime's with the workload's laid over it
(kgwe.policy.runtime_templates), with the PriorityClass the controller sets from `spec.priority`. What
else the controller fills in (scheduler, labels, GPU resources, node affinity, rendezvous variables) is
KGWE's own and nothing a policy governs. Each violation is reported at the workload's field it comes
from: the role's template or the workload's (naming the runtime when the field is the runtime's),
`spec.priority` for the PriorityClass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kgwe.policy import runtime_templates as rt
from kgwe.policy.gpu_workload import GPUWorkload, has_containers
from kgwe.policy.pod_template_policy import DEFAULT_SPEC, PodTemplatePolicy, policy_for, template_violations
from kgwe.policy.workload_runtime import WorkloadRuntimeSpec

FieldPath = tuple[str | int, ...]


def violations(
    wl: GPUWorkload,
    namespace: str | None,
    policies: Sequence[PodTemplatePolicy],
    runtime_name: str | None,
    runtime: WorkloadRuntimeSpec | None,
    priority_class: str | None,
) -> list[tuple[FieldPath, str]]:
    """(field path in the workload, message) for each field of its pods' templates that the policy of
    `namespace` (the one naming no namespace when `namespace` is None) does not allow; each once, although
    roles without a template of their own repeat the workload's."""
    policy = policy_for(namespace, policies)
    allow = policy.spec if policy else DEFAULT_SPEC
    out: dict[tuple[FieldPath, str], None] = {}
    for i, role in enumerate(wl.spec.effective_roles()):
        template = rt.role_template(role.pod_template, runtime)
        from_runtime = runtime is not None and not has_containers(role.pod_template)
        if priority_class:  # as the planner sets it
            spec = template.setdefault("spec", {})
            if isinstance(spec, dict):
                spec["priorityClassName"] = priority_class
        for v in template_violations(template, allow):
            message = v.message(policy)
            if priority_class and v.path == ("spec", "priorityClassName"):
                out[(("spec", "priority"), message)] = None
                continue
            if from_runtime and not _present(role.pod_template or {}, v.path):
                message += f" (from WorkloadRuntime {runtime_name})"
            out[((*rt.template_path(wl, i), *v.path), message)] = None
    return list(out)


def _present(template: Mapping[str, Any], path: FieldPath) -> bool:
    """`path` is set in `template` (the workload's own; else the value came from the runtime)."""
    node: object = template
    for key in path:
        if isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        elif isinstance(node, Mapping) and isinstance(key, str) and key in node:
            node = node.get(key)
        else:
            return False
    return True
