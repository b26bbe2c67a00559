"""GPUWorkload (kgwe.nvidia.io/v1): one GPU job, as the seeds wrote it, plus what distributed jobs need.

`gpuRequirements` are per pod. A workload has one or more roles (launcher/worker/...), each with replicas;
without `roles` it is one role `worker` with `distributedConfig.nodes` (else `replicas`, else 1) pods.
More than one pod of a batch kind is admitted all-or-nothing (`gang`). The controller turns it into
Indexed Jobs or a Deployment (kgwe/workloads); `problems()` is the one feasibility check that `kgwe validate`
and the controller both run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from kgwe.policy.base import ClusterObjectMeta, DnsLabel, KgweModel, KgweObject
from kgwe.policy.cluster_kinds import Condition
from kgwe.policy.diagnostics import Path as FieldPath
from kgwe.policy.pod_template import TemplateErrors, template_findings
from kgwe.policy.types import DNS_SUBDOMAIN_PATTERN, LabelValue, PositiveDuration
from kgwe.vocab import DEFAULT_CURRENCY, ScoringStrategy, TopologyPreference

WorkloadType = Literal["Training", "DistributedTraining", "Batch", "HPC", "Inference", "Interactive"]
BATCH_TYPES: tuple[str, ...] = ("Training", "DistributedTraining", "Batch", "HPC")
GangBackend = Literal["Auto", "Native", "Kueue", "None"]
Phase = Literal["Pending", "Scheduled", "Running", "Succeeded", "Failed"]

HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_ROLE = "worker"
MAX_PODS = 1024  # Indexed Job completions KGWE creates per role; also bounds the gang


class TopologyRequirement(KgweModel):
    preference: TopologyPreference = "None"
    # GB/s both directions, as vendors quote NVLink (A100 600, H100 900); pods carry the per-direction half
    min_bandwidth_gbps: float | None = Field(default=None, ge=0, alias="minBandwidthGBps")


class GPURequirements(KgweModel):
    """What ONE pod needs: whole GPUs, MIG instances of one profile, or a share of one GPU."""

    count: int = Field(default=1, ge=1, le=64)  # whole GPUs, or MIG instances with migProfile
    min_memory_gb: float | None = Field(default=None, ge=0, alias="minMemoryGB")
    product: str | None = None  # GFD product or family (e.g. H100) the GPUs must be
    mig_profile: str | None = Field(default=None, pattern=r"^\d+g\.\d+gb([+-][a-z.]+)?$")
    gpu_milli: int | None = Field(default=None, ge=1, le=1000)  # share of one GPU (nvidia.com/gpu.shared)
    topology: TopologyRequirement = Field(default_factory=TopologyRequirement)

    @model_validator(mode="after")
    def _one_kind(self) -> GPURequirements:
        if self.mig_profile and self.gpu_milli is not None:
            raise ValueError("set migProfile or gpuMilli, not both")
        if self.gpu_milli is not None and self.count != 1:
            raise ValueError("gpuMilli is a share of ONE GPU: count must be 1")
        return self


class DistributedConfig(KgweModel):
    strategy: str | None = None  # e.g. DDP, FSDP, DeepSpeed, Horovod, MPI
    backend: str | None = None  # e.g. nccl, gloo, mpi
    world_size: int | None = Field(default=None, ge=1)
    replicas: int | None = Field(default=None, ge=1, le=MAX_PODS)
    nodes: int | None = Field(default=None, ge=1, le=MAX_PODS)
    gpus_per_node: int | None = Field(default=None, ge=1)
    processes_per_node: int | None = Field(default=None, ge=1)
    master_port: int | None = Field(default=None, ge=1, le=65535)


class RetryPolicy(KgweModel):
    """Whole-gang restarts after a member fails: delay = min(cap, base * 2**retry) * (1 ± jitter)."""

    max_retries: int = Field(default=3, ge=0, le=100)
    backoff_seconds: int = Field(default=10, ge=1, le=86400)
    max_backoff_seconds: int = Field(default=600, ge=1, le=86400)
    jitter: float = Field(default=0.2, ge=0, le=1)


class GangPolicy(KgweModel):
    """All-or-nothing admission through an existing engine (native PodGroup or Kueue), never our own."""

    min_member: int | None = Field(default=None, ge=1, le=MAX_PODS)  # default: every pod of the workload
    timeout_seconds: int = Field(default=300, ge=1, le=86400)  # not all scheduled by then -> GangTimeout
    backend: GangBackend = "Auto"
    queue_name: str | None = Field(default=None, pattern=DNS_SUBDOMAIN_PATTERN)  # Kueue LocalQueue


class Role(KgweModel):
    name: DnsLabel
    replicas: int = Field(default=1, ge=1, le=MAX_PODS)
    gpu_requirements: GPURequirements | None = None  # default: the workload's
    pod_template: dict[str, Any] | None = None  # default: the workload's

    @field_validator("pod_template")
    @classmethod
    def _template(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            check_template(v)
        return v


class GPUWorkloadSpec(KgweModel):
    gpu_requirements: GPURequirements = Field(alias="gpuRequirements")
    workload_type: WorkloadType = "Training"
    framework: str | None = None  # e.g. PyTorch, TensorFlow, JAX, Triton
    distributed_config: DistributedConfig | None = None
    # An integer (the highest PriorityClass at or below it is used) or a PriorityClass name.
    priority: int | str | None = None
    scheduling_strategy: ScoringStrategy | None = None  # served by a ScoringProfile of that strategy
    scoring_profile: str | None = None
    team: LabelValue | None = None  # becomes the kgwe.nvidia.io/team label of its pods
    exclusive_access: bool = False  # never on time-sliced GPUs (nodes with nvidia.com/gpu.replicas > 1)
    retry_policy: RetryPolicy = Field(default_factory=RetryPolicy)
    # How often the job saves a checkpoint a restart resumes from: what the spot advice counts as lost to an
    # interruption (half an interval on average). None: the job keeps no checkpoints KGWE knows of.
    checkpoint_interval: PositiveDuration | None = None
    roles: list[Role] | None = Field(default=None, min_length=1, max_length=8)
    gang: GangPolicy = Field(default_factory=GangPolicy)
    suspend: bool = False
    pod_template: dict[str, Any] = Field(default_factory=dict)  # a core/v1 PodTemplateSpec
    # The WorkloadRuntime whose template the pods get when the podTemplate has no containers; default: the
    # runtime serving this framework and workloadType
    runtime: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)

    @field_validator("pod_template")
    @classmethod
    def _template(cls, v: dict[str, Any]) -> dict[str, Any]:
        check_template(v)
        return v

    @field_validator("priority")
    @classmethod
    def _priority(cls, v: int | str | None) -> int | str | None:
        import re

        if isinstance(v, str) and not re.match(DNS_SUBDOMAIN_PATTERN, v):
            raise ValueError(f"{v!r} is neither an integer nor a PriorityClass name")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> GPUWorkloadSpec:
        if self.scheduling_strategy and self.scoring_profile:
            raise ValueError("set schedulingStrategy or scoringProfile, not both")
        if self.roles is not None:
            names = [r.name for r in self.roles]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"roles: duplicate role name(s) {dup}")
        dc, req = self.distributed_config, self.gpu_requirements
        whole = req.mig_profile is None and req.gpu_milli is None
        if dc and dc.gpus_per_node is not None and whole and dc.gpus_per_node != req.count:
            raise ValueError(
                f"distributedConfig.gpusPerNode {dc.gpus_per_node} differs from "
                f"gpuRequirements.count {req.count}"
            )
        if dc and dc.world_size is not None and self.roles is None:
            nproc = self._processes_per_pod()
            pods = dc.nodes or dc.replicas or dc.world_size // nproc
            if dc.world_size != pods * nproc:
                raise ValueError(
                    f"distributedConfig.worldSize {dc.world_size} is not pods × processes per pod "
                    f"({pods} × {nproc})"
                )
        if self.runtime and all(has_containers(r.pod_template) for r in self.effective_roles()):
            raise ValueError(
                f"runtime {self.runtime}: every role brings its own containers, so no role would use it; "
                "remove `runtime` or the podTemplate's containers"
            )
        if self.gang.min_member is not None and self.gang.min_member > self.total_pods:
            raise ValueError(
                f"gang.minMember {self.gang.min_member} is more than the workload's {self.total_pods} pod(s)"
            )
        return self

    @property
    def is_batch(self) -> bool:
        return self.workload_type in BATCH_TYPES

    def _processes_per_pod(self) -> int:
        dc, req = self.distributed_config, self.gpu_requirements
        whole = req.mig_profile is None and req.gpu_milli is None
        return (dc.processes_per_node if dc else None) or (req.count if whole else 1)

    def effective_roles(self) -> list[Role]:
        """Roles with requirements and templates filled in from the workload. Without `roles` the pod count
        is distributedConfig.nodes, else .replicas, else worldSize / processes per pod, else 1."""
        if self.roles is None:
            dc = self.distributed_config
            by_world = max(1, dc.world_size // self._processes_per_pod()) if dc and dc.world_size else 1
            replicas = (dc.nodes or dc.replicas or by_world) if dc else 1
            return [  # fields already validated: construct without checking the template again
                Role.model_construct(
                    name=DEFAULT_ROLE,
                    replicas=replicas,
                    gpu_requirements=self.gpu_requirements,
                    pod_template=self.pod_template,
                )
            ]
        return [
            Role.model_construct(
                name=r.name,
                replicas=r.replicas,
                gpu_requirements=r.gpu_requirements or self.gpu_requirements,
                pod_template=r.pod_template if r.pod_template is not None else self.pod_template,
            )
            for r in self.roles
        ]

    @property
    def total_pods(self) -> int:
        return sum(r.replicas for r in self.effective_roles())

    @property
    def min_member(self) -> int:
        return self.gang.min_member or self.total_pods


class WorkloadPlacement(KgweModel):
    pod: str
    node: str
    gpus: list[int] = Field(default_factory=list)


class WorkloadCost(KgweModel):
    gpu_hours: str = Field(alias="gpuHours")  # Decimal as a string
    amount: str  # money, Decimal as a string
    currency: str = DEFAULT_CURRENCY
    as_of: str | None = None


class PredictedDuration(KgweModel):
    """Seconds: the expected (mean) duration and its quantiles (kgwe.optimizer.runtime)."""

    expected: int | None = None
    p10: int | None = None
    p50: int | None = None
    p90: int | None = None


class PredictedCost(KgweModel):
    expected: str  # money, Decimal as a string: GPUs x expected duration x price
    p90: str  # the same at the duration's P90
    currency: str = DEFAULT_CURRENCY
    gpus: str | None = None  # physical GPUs all its pods hold, as metering prices them
    price_per_gpu_hour: str | None = Field(default=None, alias="pricePerGPUHour")
    product: str | None = None  # the product priced
    note: str | None = None  # how the price was chosen when not the product the workload names


class WorkloadPrediction(KgweModel):
    """What the optimizer predicted at admission (kgwe.optimizer.admission), with why."""

    duration_seconds: PredictedDuration = Field(default_factory=PredictedDuration, alias="durationSeconds")
    cost: PredictedCost | None = None
    reason: str = ""  # "from 37 finished runs of runtime torch-distributed in ml-research (of 412 in all)"
    fallback: str | None = None  # set when no finished run was like it: what was used instead, and why
    samples: int = 0
    predicted_at: str | None = Field(default=None, alias="predictedAt")


class GPUWorkloadStatus(KgweModel):
    model_config = ConfigDict(extra="allow")

    phase: Phase | None = None
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    placements: list[WorkloadPlacement] = Field(default_factory=list)
    nodes: str | None = None  # comma-separated node names, for the print column
    gpus: int | None = None  # GPUs (or MIG instances / shares) the workload's pods request in total
    gang_backend: str | None = None
    retry_count: int = 0
    next_retry_time: str | None = None
    run: int = 0  # the current attempt's number; child objects carry it
    runtime: str | None = None  # the WorkloadRuntime roles without containers got at admission
    cost: WorkloadCost | None = None
    prediction: WorkloadPrediction | None = None  # duration and cost expected at admission


class GPUWorkload(KgweObject):
    KIND: ClassVar[str] = "GPUWorkload"
    kind: Literal["GPUWorkload"] = "GPUWorkload"
    metadata: ClusterObjectMeta | None = None  # type: ignore[assignment]  # a manifest may leave it out; kubectl or CI adds it

    @property
    def name(self) -> str:
        return self.metadata.name if self.metadata else ""

    spec: GPUWorkloadSpec
    status: GPUWorkloadStatus | None = None


def has_containers(template: Mapping[str, Any] | None) -> bool:
    """A template that names its own containers (else a WorkloadRuntime supplies them)."""
    return bool(((template or {}).get("spec") or {}).get("containers"))


def check_template(template: Mapping[str, Any], *, require_containers: bool = False) -> None:
    """A core/v1 PodTemplateSpec as the API server reads a Job's template (kgwe.policy.pod_template), that
    does not pin a node (the seeds' controllers bypassed the scheduler; KGWE places pods). TemplateErrors
    with the path of each finding below the template."""
    findings = template_findings(template, require_containers=require_containers)
    if not findings:
        findings = _pinning(template.get("spec") or {})
    if findings:
        raise TemplateErrors(findings)


def _pinning(spec: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """Fields of a schema-valid pod spec that choose the node instead of the scheduler."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    if spec.get("nodeName"):
        out.append((("spec", "nodeName"), "pins the pod to a node; KGWE's scheduler places it; remove it"))
    if HOSTNAME_LABEL in (spec.get("nodeSelector") or {}):
        out.append(
            (("spec", "nodeSelector", HOSTNAME_LABEL), "pins the pod to a node; KGWE's scheduler places it")
        )
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    base = ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    for i, term in enumerate(required.get("nodeSelectorTerms") or []):
        for kind in ("matchExpressions", "matchFields"):
            for j, expr in enumerate((term or {}).get(kind) or []):
                if (expr or {}).get("key") in (HOSTNAME_LABEL, "metadata.name"):
                    out.append(
                        (
                            (*base, "nodeSelectorTerms", i, kind, j, "key"),
                            "pins the pod to named nodes; KGWE places it",
                        )
                    )
    return out


@dataclass(frozen=True)
class NodeOffer:
    """What one node (or class of nodes) can give a pod: its GPU count, product, MIG profiles."""

    gpus: int
    product: str = ""
    mig_profiles: frozenset[str] = frozenset()


def problems(spec: GPUWorkloadSpec, offers: Iterable[NodeOffer] | None) -> list[tuple[FieldPath, str]]:
    """Requests no node could ever serve, as (field path, message). No offers known: nothing to say."""
    offers = list(offers or [])
    if not offers:
        return []
    out: list[tuple[FieldPath, str]] = []
    for i, role in enumerate(spec.effective_roles()):
        req = role.gpu_requirements
        assert req is not None
        base: FieldPath = (
            ("spec", "roles", i, "gpuRequirements") if spec.roles else ("spec", "gpuRequirements")
        )
        if spec.roles and spec.roles[i].gpu_requirements is None:
            base = ("spec", "gpuRequirements")
        fitting = [o for o in offers if not req.product or _product_matches(req.product, o.product)]
        if req.product and not fitting:
            out.append(((*base, "product"), f'no node offers product "{req.product}"'))
            continue
        if req.mig_profile:
            if not any(req.mig_profile in o.mig_profiles for o in fitting):
                offered = sorted({p for o in fitting for p in o.mig_profiles})
                out.append(
                    (
                        (*base, "migProfile"),
                        f'no node offers MIG profile "{req.mig_profile}"'
                        + (f" (offered: {', '.join(offered)})" if offered else " (no node offers MIG)"),
                    )
                )
            continue
        most = max(o.gpus for o in fitting)
        if req.gpu_milli is None and req.count > most:
            out.append(
                (
                    (*base, "count"),
                    f"{req.count} GPUs in one pod, but the largest node has {most}; "
                    "split the job into more pods (roles[].replicas or distributedConfig.nodes)",
                )
            )
    return out


def _product_matches(wanted: str, product: str) -> bool:
    from kgwe.gpu import catalog

    if wanted.lower() in product.lower():
        return True
    model = catalog.model_for_product(product)
    return model is not None and model in catalog.models_matching(wanted)
