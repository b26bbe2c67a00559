"""Which WorkloadRuntime a GPUWorkload gets, and the pod template that results (pure).

A role whose template names containers keeps its template as written. A role without containers gets the
runtime's template with the workload's template laid over it: maps merge (the workload's keys win, so a
nodeSelector, labels or annotations can be added), lists and plain values replace the runtime's. The runtime
is the one `spec.runtime` names, else the one serving the workload's framework and workloadType.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kgwe.policy.gpu_workload import GPUWorkload, has_containers
from kgwe.policy.workload_runtime import WorkloadRuntimeSpec, framework_key, launcher_for_framework

Runtimes = Mapping[str, WorkloadRuntimeSpec]


def needs_runtime(wl: GPUWorkload) -> bool:
    """Some role has no containers of its own."""
    return any(not has_containers(r.pod_template) for r in wl.spec.effective_roles())


def serving(runtimes: Runtimes, framework: str | None, workload_type: str) -> list[str]:
    """Names of the runtimes serving this framework and workload type (one in a valid repository)."""
    key = framework_key(framework)
    return sorted(
        name
        for name, rt in runtimes.items()
        if framework_key(rt.framework) == key and workload_type in rt.workload_types
    )


def select(wl: GPUWorkload, runtimes: Runtimes) -> tuple[str | None, str | None]:
    """(runtime name, None), (None, None) when every role brings its containers, or (None, why not)."""
    if not needs_runtime(wl):
        return None, None
    spec = wl.spec
    if spec.runtime:
        if spec.runtime in runtimes:
            return spec.runtime, None
        return None, f'no WorkloadRuntime "{spec.runtime}" ({available(runtimes)})'
    if not spec.framework:
        return None, (
            "the pod template has no containers and no framework or runtime names a WorkloadRuntime to "
            f"supply them ({available(runtimes)}); set spec.framework, spec.runtime or the containers"
        )
    names = serving(runtimes, spec.framework, spec.workload_type)
    if not names:
        return None, (
            f"the pod template has no containers and no WorkloadRuntime serves framework {spec.framework} "
            f"for workloadType {spec.workload_type} ({available(runtimes)}); add one to the policy "
            "repository, name one with spec.runtime, or give the containers"
        )
    return names[0], None


def available(runtimes: Runtimes) -> str:
    if not runtimes:
        return "the policy repository has no WorkloadRuntime"
    listed = ", ".join(
        f"{name} ({rt.framework}: {'/'.join(rt.workload_types)})" for name, rt in sorted(runtimes.items())
    )
    return f"available: {listed}"


def overlay(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` laid over `base`: maps merge recursively with `top` winning; anything else replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = overlay(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def role_template(template: Mapping[str, Any] | None, runtime: WorkloadRuntimeSpec | None) -> dict[str, Any]:
    """The pod template one role's pods are made from (a copy the caller may change)."""
    if runtime is None or has_containers(template):
        return copy.deepcopy(dict(template or {}))
    return overlay(runtime.template, template or {})


def template_path(wl: GPUWorkload, index: int) -> tuple[str | int, ...]:
    """Where the template of role `index` (of effective_roles()) is written in the workload: the role's own,
    else the workload's."""
    spec = wl.spec
    if spec.roles and spec.roles[index].pod_template is not None:
        return ("spec", "roles", index, "podTemplate")
    return ("spec", "podTemplate")


def launcher(wl: GPUWorkload, runtime: WorkloadRuntimeSpec | None) -> str:
    """The distributed launcher's wiring the pods get: the runtime's, else the framework's."""
    return runtime.launcher if runtime is not None else launcher_for_framework(wl.spec.framework)
