"""What a GPUWorkload resolves to on a cluster before anything is created (pure): its gang engine, scoring
profile and PriorityClass, the GPU resources each pod requests, and whether its pods' names fit. Admission
(kgwe.policy.admission) refuses with these; the controller's planner (kgwe.workloads.plan) builds with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kgwe.policy.gpu_workload import GPURequirements, GPUWorkload
from kgwe.policy.kueue_setup import KueueNamespace
from kgwe.policy.workload_runtime import WorkloadRuntimeSpec
from kgwe.vocab import (
    API_GROUP,
    GPU_MILLI_ANNOTATION,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    SCHEDULER_NAME,
    SHARED_GPU_RESOURCE,
)

PODGROUP_API = "scheduling.k8s.io/v1beta1"
HOSTNAME_MAX = 63  # a pod hostname (<job>-<index>) is a DNS label
GANG_BACKENDS = ("Native", "Kueue", "None")


class PlanError(ValueError):
    """The workload cannot be turned into objects (reason, message) -> Admitted=False."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Facts:
    """What the controller resolved from the cluster for this workload."""

    run: int = 0
    gang_backend: str = "None"  # Native | Kueue | None (already resolved from Auto)
    scoring_profile: str | None = (
        None  # from spec.scoringProfile or the profile serving spec.schedulingStrategy
    )
    priority_class: str | None = None
    scheduler_name: str = SCHEDULER_NAME
    runtime_name: str | None = (
        None  # the WorkloadRuntime roles without containers get (kgwe.policy.runtime_templates)
    )
    runtime: WorkloadRuntimeSpec | None = None


def child_name(workload: str, run: int, role: str) -> str:
    return f"{workload}-r{run}-{role}"


def podgroup_name(workload: str, run: int) -> str:
    return f"{workload}-r{run}"


def deployment_name(workload: str, role: str) -> str:
    return f"{workload}-{role}"


def child_refs(
    wl: GPUWorkload, run: int, native_gang: bool, kueue: bool = False
) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of every child run `run` of `wl` gets, in kgwe.workloads.plan's order
    (`kueue`: the run goes through Kueue, as pods of one Kueue pod group instead of Jobs)."""
    if not wl.spec.is_batch:
        return [
            ("apps/v1", "Deployment", deployment_name(wl.name, r.name)) for r in wl.spec.effective_roles()
        ]
    refs = [(PODGROUP_API, "PodGroup", podgroup_name(wl.name, run))] if native_gang and not kueue else []
    refs.append(("v1", "Service", wl.name))
    if kueue:
        return refs + [("v1", "Pod", name) for name in kueue_pod_names(wl, run)]
    refs += [("batch/v1", "Job", child_name(wl.name, run, r.name)) for r in wl.spec.effective_roles()]
    return refs


def kueue_pod_names(wl: GPUWorkload, run: int) -> list[str]:
    """The pods of a run that goes through Kueue (each the hostname its Job's pod would have had)."""
    roles = wl.spec.effective_roles()
    return [f"{child_name(wl.name, run, role.name)}-{i}" for role in roles for i in range(role.replicas)]


@dataclass(frozen=True)
class ChildWrite:
    """What the controller may do with one child: `create` it (absent), `update` it (this workload controls
    it; `resource_version` is the update's precondition, so an object replaced meanwhile is not written), or
    `refuse` (`why`: whose it is)."""

    action: Literal["create", "update", "refuse"]
    resource_version: str | None = None
    why: str = ""


def controlled_by(meta: Mapping[str, Any], workload: str, uid: str | None) -> bool:
    """Is a GPUWorkload the object's controller: this one by uid, or (uid unknown, e.g. `kgwe validate` of a
    manifest) one of this name, which in the same namespace is the same workload."""
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, Mapping) or not ref.get("controller"):
            continue
        group = str(ref.get("apiVersion") or "").split("/", 1)[0]
        if ref.get("kind") == "GPUWorkload" and group == API_GROUP and ref.get("name") == workload:
            return not uid or ref.get("uid") == uid
    return False


def child_write(live: Mapping[str, Any] | None, what: str, workload: str, uid: str | None) -> ChildWrite:
    """Whether GPUWorkload `workload` may write its child `what` ("Service/train"), given the live object's
    metadata (None: absent). A name is never taken over: an object someone else made (a StatefulSet's
    headless Service, another controller's Job), or one of a deleted workload of the same name still being
    garbage-collected, is refused, and stays as it is."""
    if live is None:
        return ChildWrite("create")
    if controlled_by(live, workload, uid):
        return ChildWrite("update", resource_version=str(live.get("resourceVersion") or "") or None)
    owner = next(
        (r for r in live.get("ownerReferences") or [] if isinstance(r, Mapping) and r.get("controller")), None
    )
    whose = (
        f"controlled by {owner.get('kind')}/{owner.get('name')}" if owner else "not made by this GPUWorkload"
    )
    return ChildWrite(
        "refuse",
        why=f"{what} already exists, {whose}: KGWE never takes over an object by its name (rename the "
        "GPUWorkload, or remove that object)",
    )


def gpu_resources(req: GPURequirements) -> tuple[dict[str, int], dict[str, str]]:
    """(extended resources, extra annotations) one pod requests for these requirements."""
    if req.mig_profile:
        return {MIG_RESOURCE_PREFIX + req.mig_profile.replace("+", "."): req.count}, {}
    if req.gpu_milli is not None and req.gpu_milli < 1000:
        return {SHARED_GPU_RESOURCE: 1}, {GPU_MILLI_ANNOTATION: str(req.gpu_milli)}
    return {GPU_RESOURCE: req.count if req.gpu_milli is None else 1}, {}


def resolve_backend(
    wanted: str,
    total_pods: int,
    native: bool,
    kueue: bool,
    batch: bool = True,
    here: KueueNamespace | None = None,
    queue_name: str | None = None,
) -> tuple[str, str | None]:
    """(backend, problem). `kueue`: Kueue is installed; `here`: how it would treat the workload's namespace
    (None: not known, e.g. offline — Kueue is then assumed to admit the pods as asked).

    Where Kueue takes every Job (kgwe.policy.kueue_setup), a batch run always goes through Kueue, as one pod
    group: anything else would be split into a Kueue Workload per Job. Elsewhere one pod, or a serving kind
    (replicas serve on their own), needs no gang; Auto prefers the native PodGroup, then Kueue."""
    if not batch:
        return "None", None
    takes_jobs = here.takes_every_job() if here is not None else None
    if takes_jobs:
        problem = here.pod_group_problem(queue_name) if here is not None else None
        if wanted == "Native":
            return (
                "None",
                f"{takes_jobs}: each Job would be admitted on its own; use gang.backend Kueue or Auto",
            )
        if problem:
            return "None", f"{takes_jobs}, so its pods must go through Kueue as one group, but {problem}"
        return "Kueue", None
    if total_pods <= 1 or wanted == "None":
        return "None", None
    if wanted == "Native":
        return (
            ("Native", None)
            if native
            else ("None", "the API server does not serve scheduling.k8s.io/v1beta1 PodGroups")
        )
    kueue_problem = (
        "Kueue is not installed (no kueue.x-k8s.io API)"
        if not kueue
        else (here.pod_group_problem(queue_name) if here is not None else None)
    )
    if wanted == "Kueue":
        return ("Kueue", None) if kueue_problem is None else ("None", kueue_problem)
    if native:
        return "Native", None
    if kueue_problem is None:
        return "Kueue", None
    why = "" if not kueue else f"; Kueue: {kueue_problem}"
    return "None", f"no gang engine: neither native PodGroups (GenericWorkload) nor Kueue is available{why}"


def gang_phrase(backend: str, total_pods: int, batch: bool = True) -> str:
    """How a run's pods are admitted, in words for messages (never a bare "None")."""
    if backend != "None":
        return f"gang {backend}"
    if total_pods <= 1:
        return "no gang (one pod)"
    return "no gang (replicas serve on their own)" if not batch else "no gang (spec.gang.backend None)"


def resolve_profile(wl: GPUWorkload, profiles: Mapping[str, str]) -> str | None:
    """The scoring profile for the pods: named, or the first (by name) whose strategy is the asked one.

    `profiles` maps profile name -> strategy (from the kgwe-scoring ConfigMap)."""
    if wl.spec.scoring_profile:
        return wl.spec.scoring_profile
    wanted = wl.spec.scheduling_strategy
    if not wanted:
        return None
    for name in sorted(profiles):
        if profiles[name] == wanted:
            return name
    raise PlanError(
        "NoScoringProfile",
        f"no ScoringProfile uses strategy {wanted} (have: "
        + (", ".join(f"{n}={s}" for n, s in sorted(profiles.items())) or "none")
        + ")",
    )


def resolve_priority(priority: int | str | None, classes: Mapping[str, int]) -> str | None:
    """A PriorityClass name: as given, or the highest class whose value is at most the integer."""
    if priority is None:
        return None
    if isinstance(priority, str):
        if priority not in classes:
            raise PlanError("NoPriorityClass", f'no PriorityClass "{priority}"')
        return priority
    fitting = [(v, n) for n, v in classes.items() if v <= priority]
    return max(fitting)[1] if fitting else None


def name_problem(wl: GPUWorkload, run: int) -> str | None:
    """Why the pods' hostnames <workload>-r<run>-<role>-<index> cannot be made, or None."""
    roles = wl.spec.effective_roles()
    longest = max(len(child_name(wl.name, run, r.name)) for r in roles)
    digits = len(str(max(r.replicas for r in roles) - 1))
    if longest + 1 + digits <= HOSTNAME_MAX:
        return None
    return (
        f"pod hostnames <workload>-r<run>-<role>-<index> exceed {HOSTNAME_MAX} characters "
        f"({longest + 1 + digits} for run {run}); shorten metadata.name or the role names"
    )
