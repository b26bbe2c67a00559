"""The controller's pod-template check: the pods it is about to create for a workload, judged by the
PodTemplatePolicy of the workload's namespace (kgwe.policy.pod_template_policy, the same rules `kgwe
validate` applies to the workload's own templates).

It judges the planned children, not only what the workload wrote, so nothing the controller would create
escapes it; a finding is reported at the field of the workload that caused it (the role's template or the
workload's, `spec.priority` for a PriorityClass it resolved to).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kgwe.policy.diagnostics import format_path
from kgwe.policy.gpu_workload import GPUWorkload
from kgwe.policy.pod_template_policy import DEFAULT_SPEC, PodTemplatePolicy, policy_for, template_violations
from kgwe.workloads.plan import ROLE_LABEL

POD_OWNERS = ("Job", "Deployment")
MAX_FINDINGS = 3  # in the condition message; the rest are counted


def _source(wl: GPUWorkload, role: str | None) -> tuple[str | int, ...]:
    """Where the template of `role` came from in the workload."""
    for i, r in enumerate(wl.spec.roles or []):
        if r.name == role and r.pod_template is not None:
            return ("spec", "roles", i, "podTemplate")
    return ("spec", "podTemplate")


def template_refusal(
    wl: GPUWorkload,
    children: Sequence[Mapping[str, Any]],
    policies: Sequence[PodTemplatePolicy],
    namespace: str,
    priority_class: str | None = None,
) -> str | None:
    """Why the children's pod templates may not be created in `namespace`; None when they may.
    `priority_class` is the class the controller resolved from spec.priority, if any."""
    policy = policy_for(namespace, policies)
    allow = policy.spec if policy else DEFAULT_SPEC
    found: list[str] = []
    for child in children:
        template = (child.get("spec") or {}).get("template")
        if child.get("kind") not in POD_OWNERS or not isinstance(template, Mapping):
            continue
        base = _source(wl, (child["metadata"].get("labels") or {}).get(ROLE_LABEL))
        for v in template_violations(template, allow):
            resolved = v.path == ("spec", "priorityClassName") and priority_class is not None
            where = ("spec", "priority") if resolved else (*base, *v.path)
            found.append(f"{format_path(where)}: {v.message(policy)}")
    unique = list(dict.fromkeys(found))  # every role's Job repeats the workload-wide template
    if not unique:
        return None
    more = f" (and {len(unique) - MAX_FINDINGS} more)" if len(unique) > MAX_FINDINGS else ""
    return "; ".join(unique[:MAX_FINDINGS]) + more
