"""Pure planning: a GPUWorkload and a few cluster facts -> the child objects KGWE creates for it.

Batch kinds become one Indexed Job per role plus a headless Service (stable hostnames
`<job>-<index>.<service>`); serving kinds a Deployment per role. Children of attempt `run` carry the run in
their names, so a gang restart creates fresh Jobs while the old ones are still being deleted. A workload of
more than one pod is all-or-nothing through an existing engine: a native PodGroup (scheduling.k8s.io/v1beta1,
created before the pods, pods linked by spec.schedulingGroup), or Kueue. Through Kueue a run is ONE Kueue
pod group (kgwe.policy.kueue_setup says why): KGWE creates the pods itself, with the hostnames the Jobs'
pods would have had and the completion index their rank variables read, labelled
kueue.x-k8s.io/pod-group-name, so all roles are one Kueue Workload that Kueue admits whole, and no Job exists
for Kueue to admit on its own.
"""

from __future__ import annotations

import copy
from typing import Any

from kgwe.policy import runtime_templates as runtimes
from kgwe.policy.gpu_workload import GPURequirements, GPUWorkload, Role
from kgwe.policy.workload_resolution import (
    PODGROUP_API,
    Facts,
    PlanError,
    child_name,
    deployment_name,
    gpu_resources,
    name_problem,
    podgroup_name,
)
from kgwe.vocab import (
    API_VERSION,
    GPU_PRODUCT_ANNOTATION,
    GPU_REPLICAS_LABEL,
    KUEUE_GROUP_LABEL,
    KUEUE_GROUP_TOTAL_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MIN_BANDWIDTH_ANNOTATION,
    MIN_MEMORY_ANNOTATION,
    ROLE_LABEL,
    RUN_LABEL,
    SCORING_PROFILE_ANNOTATION,
    TEAM_LABEL,
    TOPOLOGY_PREFERENCE_ANNOTATION,
    WORKLOAD_LABEL,
    is_gpu_resource,
)

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
TORCH_MASTER_PORT = 29500  # Kubeflow Trainer's default


def placement_annotations(req: GPURequirements, scoring_profile: str | None) -> dict[str, str]:
    """KGWE's pod annotations the extender reads (see kgwe.extender.request)."""
    ann: dict[str, str] = {}
    if req.topology.preference != "None":
        ann[TOPOLOGY_PREFERENCE_ANNOTATION] = req.topology.preference
    if req.topology.min_bandwidth_gbps is not None:
        # The spec quotes NVLink as vendors do (both directions: A100 600 GB/s, H100 900 GB/s); the
        # extender measures per direction (DGX-A100 pairs: 300 GB/s), so the pod asks for half.
        ann[MIN_BANDWIDTH_ANNOTATION] = _num(req.topology.min_bandwidth_gbps / 2)
    if req.min_memory_gb is not None:
        ann[MIN_MEMORY_ANNOTATION] = _num(req.min_memory_gb)
    if req.product:
        ann[GPU_PRODUCT_ANNOTATION] = req.product
    if scoring_profile:
        ann[SCORING_PROFILE_ANNOTATION] = scoring_profile
    return ann


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def owner_reference(wl: GPUWorkload, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUWorkload",
        "name": wl.name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def plan_children(wl: GPUWorkload, namespace: str, uid: str, facts: Facts) -> list[dict[str, Any]]:
    """Every child object, in creation order (PodGroup and Service before the pods' owners)."""
    spec = wl.spec
    roles = spec.effective_roles()
    total = sum(r.replicas for r in roles)
    name = wl.name
    owner = owner_reference(wl, uid)
    too_long = name_problem(wl, facts.run)
    if too_long:
        raise PlanError("NameTooLong", too_long)
    base_labels = {WORKLOAD_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    if spec.team:
        base_labels[TEAM_LABEL] = spec.team[:63]
    objs: list[dict[str, Any]] = []
    if not spec.is_batch:
        for role in roles:
            objs.append(_deployment(wl, namespace, owner, role, facts, base_labels))
        return objs
    group = podgroup_name(name, facts.run)
    if facts.gang_backend == "Native":
        pg_spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": spec.min_member}}}
        if facts.priority_class:
            pg_spec["priorityClassName"] = facts.priority_class
        objs.append(
            {
                "apiVersion": PODGROUP_API,
                "kind": "PodGroup",
                "metadata": _meta(group, namespace, {**base_labels, RUN_LABEL: str(facts.run)}, owner),
                "spec": pg_spec,
            }
        )
    objs.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(name, namespace, dict(base_labels), owner),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,  # rendezvous before readiness (as JobSet)
                "selector": {WORKLOAD_LABEL: name},
                "ports": [{"name": "rendezvous", "port": _master_port(wl, facts), "protocol": "TCP"}],
            },
        }
    )
    first_job = child_name(name, facts.run, roles[0].name)
    offset = 0
    for role in roles:
        env = _rendezvous_env(wl, facts, roles, role, offset, total, f"{first_job}-0.{name}")
        offset += role.replicas
        job = _job(wl, namespace, owner, role, facts, base_labels, env, group)
        if facts.gang_backend != "Kueue":
            objs.append(job)
        elif not wl.spec.suspend:  # a pod cannot be suspended: a suspended run has none
            objs += _kueue_pods(job, wl, group, total)
    return objs


def _meta(name: str, namespace: str, labels: dict[str, str], owner: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]}


def _master_port(wl: GPUWorkload, facts: Facts) -> int:
    dc = wl.spec.distributed_config
    if dc and dc.master_port:
        return dc.master_port
    return facts.runtime.rendezvous_port if facts.runtime is not None else TORCH_MASTER_PORT


def _rendezvous_env(
    wl: GPUWorkload, facts: Facts, roles: list[Role], role: Role, offset: int, total: int, master: str
) -> list[dict[str, Any]]:
    """KGWE's rendezvous variables, plus the launcher's: torchrun's PET_* the way Kubeflow Trainer sets
    them (and the legacy WORLD_SIZE/RANK), or JAX's coordinator variables.

    Node rank = the pod's Job completion index; with several roles each pod also gets KGWE_RANK_OFFSET
    (pods of earlier roles), since an env var cannot add two numbers."""
    port = str(_master_port(wl, facts))
    index_ref = {
        "fieldRef": {
            "apiVersion": "v1",
            "fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']",
        }
    }
    env: list[dict[str, Any]] = [
        {"name": "KGWE_WORKLOAD", "value": wl.name},
        {"name": "KGWE_ROLE", "value": role.name},
        {"name": "KGWE_RANK_OFFSET", "value": str(offset)},
        {"name": "MASTER_ADDR", "value": master},
        {"name": "MASTER_PORT", "value": port},
    ]
    dc = wl.spec.distributed_config
    if dc and dc.strategy:
        env.append({"name": "KGWE_DISTRIBUTED_STRATEGY", "value": dc.strategy})
    if dc and dc.backend:
        env.append({"name": "KGWE_DISTRIBUTED_BACKEND", "value": dc.backend})
    launcher = runtimes.launcher(wl, facts.runtime)
    if launcher == "JAX":
        # jax.distributed.initialize() reads JAX_COORDINATOR_ADDRESS itself; the program passes the other
        # two (num_processes, process_id) from the environment
        env += [
            {"name": "JAX_COORDINATOR_ADDRESS", "value": f"{master}:{port}"},
            {"name": "JAX_NUM_PROCESSES", "value": str(total)},
        ]
        if len(roles) == 1:
            env.append({"name": "JAX_PROCESS_ID", "valueFrom": index_ref})
        return env
    if launcher != "Torchrun":
        return env
    req = role.gpu_requirements
    assert req is not None
    nproc: int | str = (dc.processes_per_node if dc and dc.processes_per_node else None) or (
        req.count if not req.mig_profile and req.gpu_milli is None else 1
    )
    world = total * nproc if isinstance(nproc, int) else total
    env += [
        {"name": "PET_NNODES", "value": str(total)},
        {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
        {"name": "PET_MASTER_ADDR", "value": master},
        {"name": "PET_MASTER_PORT", "value": port},
        {"name": "WORLD_SIZE", "value": str(world)},
    ]
    if len(roles) == 1:
        env += [{"name": "PET_NODE_RANK", "valueFrom": index_ref}, {"name": "RANK", "valueFrom": index_ref}]
    return env


def _pod_template(
    wl: GPUWorkload, role: Role, facts: Facts, labels: dict[str, str], batch: bool
) -> dict[str, Any]:
    req = role.gpu_requirements
    assert req is not None
    tmpl = runtimes.role_template(role.pod_template, facts.runtime)
    meta = tmpl.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    resources, extra = gpu_resources(req)
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        **placement_annotations(req, facts.scoring_profile),
        **extra,
    }
    spec = tmpl.setdefault("spec", {})
    spec["schedulerName"] = facts.scheduler_name
    if facts.priority_class:
        spec["priorityClassName"] = facts.priority_class
    containers = spec.get("containers") or []
    if not containers:
        raise PlanError(
            "InvalidPodTemplate", "podTemplate.spec.containers is empty and no WorkloadRuntime supplies them"
        )
    for c in [*containers, *(spec.get("initContainers") or [])]:
        for section in ("limits", "requests"):
            res = (c.get("resources") or {}).get(section)
            if res:
                for key in [k for k in res if is_gpu_resource(k)]:
                    del res[key]
    res = containers[0].setdefault("resources", {})
    res["limits"] = {**(res.get("limits") or {}), **{k: str(v) for k, v in resources.items()}}
    if wl.spec.exclusive_access:
        _require_unshared_gpus(spec)
    if batch:
        spec["restartPolicy"] = "Never"
    return tmpl


def _require_unshared_gpus(spec: dict[str, Any]) -> None:
    """exclusiveAccess: only nodes whose GPUs are not time-sliced or MPS-shared (GFD gpu.replicas <= 1)."""
    node_aff = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    ours = [
        {"key": GPU_REPLICAS_LABEL, "operator": "DoesNotExist"},
        {"key": GPU_REPLICAS_LABEL, "operator": "In", "values": ["1"]},
    ]
    required["nodeSelectorTerms"] = [
        {**t, "matchExpressions": [*(t.get("matchExpressions") or []), expr]} for t in terms for expr in ours
    ]


def _kueue_pods(job: dict[str, Any], wl: GPUWorkload, group: str, total: int) -> list[dict[str, Any]]:
    """The pods the role's Indexed Job would make, made here instead, as members of a Kueue pod group.

    Kueue's webhook gates them until their group is admitted; KGWE writes no field Kueue writes."""
    template = copy.deepcopy(job["spec"]["template"])
    labels = {**job["metadata"]["labels"], **template["metadata"]["labels"], KUEUE_GROUP_LABEL: group}
    if wl.spec.gang.queue_name:
        labels[KUEUE_QUEUE_LABEL] = wl.spec.gang.queue_name
    annotations = {**template["metadata"]["annotations"], KUEUE_GROUP_TOTAL_ANNOTATION: str(total)}
    meta = job["metadata"]
    pods = []
    for index in range(job["spec"]["completions"]):
        name = f"{meta['name']}-{index}"  # the hostname the Job's pod of this index would have
        spec = {**copy.deepcopy(template["spec"]), "hostname": name}
        pod_meta = _meta(name, meta["namespace"], dict(labels), meta["ownerReferences"][0])
        pod_meta["annotations"] = {**annotations, COMPLETION_INDEX_ANNOTATION: str(index)}  # what env reads
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec})
    return pods


def _job(
    wl: GPUWorkload,
    namespace: str,
    owner: dict[str, Any],
    role: Role,
    facts: Facts,
    base_labels: dict[str, str],
    env: list[dict[str, Any]],
    group: str,
) -> dict[str, Any]:
    labels = {**base_labels, ROLE_LABEL: role.name, RUN_LABEL: str(facts.run)}
    tmpl = _pod_template(wl, role, facts, dict(labels), batch=True)
    spec = tmpl["spec"]
    spec["subdomain"] = wl.name
    if facts.gang_backend == "Native":
        spec["schedulingGroup"] = {"podGroupName": group}
    for c in spec["containers"]:
        names = {e.get("name") for e in env}
        c["env"] = [*env, *[e for e in (c.get("env") or []) if e.get("name") not in names]]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(child_name(wl.name, facts.run, role.name), namespace, labels, owner),
        "spec": {
            "completionMode": "Indexed",
            "completions": role.replicas,
            "parallelism": role.replicas,
            "backoffLimit": 0,  # a member failure fails the Job; KGWE restarts the whole gang
            "podReplacementPolicy": "Failed",  # a replacement waits until the old pod released its GPUs
            # Evictions and preemptions are not the job's fault: replace the pod, count nothing.
            "podFailurePolicy": {
                "rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
                ]
            },
            "suspend": wl.spec.suspend,
            "template": tmpl,
        },
    }


def _deployment(
    wl: GPUWorkload,
    namespace: str,
    owner: dict[str, Any],
    role: Role,
    facts: Facts,
    base_labels: dict[str, str],
) -> dict[str, Any]:
    labels = {**base_labels, ROLE_LABEL: role.name}
    tmpl = _pod_template(wl, role, facts, labels, batch=False)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(deployment_name(wl.name, role.name), namespace, labels, owner),
        "spec": {
            "replicas": 0 if wl.spec.suspend else role.replicas,
            "selector": {"matchLabels": {WORKLOAD_LABEL: wl.name, ROLE_LABEL: role.name}},
            "template": tmpl,
        },
    }


def requested_gpus(wl: GPUWorkload) -> int:
    """GPU devices (whole GPUs, MIG instances or shares) the workload's pods request in total."""
    return sum(
        r.replicas * (r.gpu_requirements.count if r.gpu_requirements else 1)
        for r in wl.spec.effective_roles()
    )
