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
    """How the GPUs of one pod must be connected."""

    preference: TopologyPreference = "None"
    """How the pod's GPUs should be connected (pod annotation `kgwe.nvidia.io/topology-preference`)."""
    min_bandwidth_gbps: float | None = Field(default=None, ge=0, alias="minBandwidthGBps")
    """Minimum GPU-to-GPU bandwidth in the chosen set, in GB/s both directions as vendors quote NVLink
    (A100 600, H100 900). The pod annotation `kgwe.nvidia.io/min-bandwidth-gbps` gets the per-direction
    half, which is what the extender measures (DGX-A100 pairs: 300)."""


class GPURequirements(KgweModel):
    """What ONE pod needs: whole GPUs, MIG instances of one profile, or a share of one GPU."""

    count: int = Field(default=1, ge=1, le=64)
    """Whole GPUs per pod (1-64), or MIG instances with `migProfile`."""
    min_memory_gb: float | None = Field(default=None, ge=0, alias="minMemoryGB")
    """Minimum memory per GPU, in decimal GB as GPUs are sold (pod annotation
    `kgwe.nvidia.io/min-memory-gb`)."""
    product: str | None = None
    """GPU product or family the GPUs must be, e.g. `H100` (pod annotation `kgwe.nvidia.io/gpu-product`)."""
    mig_profile: str | None = Field(default=None, pattern=r"^\d+g\.\d+gb([+-][a-z.]+)?$")
    """MIG profile, e.g. `1g.10gb`: the pod requests `nvidia.com/mig-<profile>`."""
    gpu_milli: int | None = Field(default=None, ge=1, le=1000)
    """A share of ONE GPU in thousandths (1-1000; `count` must be 1): the pod requests
    `nvidia.com/gpu.shared` and carries `kgwe.nvidia.io/gpu-milli`."""
    topology: TopologyRequirement = Field(default_factory=TopologyRequirement)
    """How the pod's GPUs must be connected."""

    @model_validator(mode="after")
    def _one_kind(self) -> GPURequirements:
        if self.mig_profile and self.gpu_milli is not None:
            raise ValueError("set migProfile or gpuMilli, not both")
        if self.gpu_milli is not None and self.count != 1:
            raise ValueError("gpuMilli is a share of ONE GPU: count must be 1")
        return self


class DistributedConfig(KgweModel):
    """How a job is spread over pods and processes."""

    strategy: str | None = None
    """The parallelism, e.g. DDP, FSDP, DeepSpeed, Horovod, MPI: the pods get it as
    `KGWE_DISTRIBUTED_STRATEGY`."""
    backend: str | None = None
    """The collective backend, e.g. nccl, gloo, mpi: the pods get it as `KGWE_DISTRIBUTED_BACKEND`."""
    world_size: int | None = Field(default=None, ge=1)
    """Total processes (`WORLD_SIZE`; default: pods × processes per pod). Without `roles` it must equal
    pods × processes per pod, and alone it sets the pod count."""
    replicas: int | None = Field(default=None, ge=1, le=MAX_PODS)
    """Pod count when `nodes` is not given."""
    nodes: int | None = Field(default=None, ge=1, le=MAX_PODS)
    """Pod count (one pod per node)."""
    gpus_per_node: int | None = Field(default=None, ge=1)
    """GPUs per pod; when given it must equal `gpuRequirements.count` (whole GPUs)."""
    processes_per_node: int | None = Field(default=None, ge=1)
    """Processes per pod (`PET_NPROC_PER_NODE`; default: the pod's GPUs)."""
    master_port: int | None = Field(default=None, ge=1, le=65535)
    """The rendezvous port (`PET_MASTER_PORT`, `MASTER_PORT`; default: the WorkloadRuntime's
    `rendezvousPort`, else 29500)."""


class RetryPolicy(KgweModel):
    """Whole-gang restarts after a member fails: delay = min(cap, base * 2**retry) * (1 ± jitter)."""

    max_retries: int = Field(default=3, ge=0, le=100)
    """Whole-gang restarts after member failures (0-100)."""
    backoff_seconds: int = Field(default=10, ge=1, le=86400)
    """Base delay: restart n (0-based) waits `min(maxBackoffSeconds, backoffSeconds·2ⁿ)·(1 ± jitter)`."""
    max_backoff_seconds: int = Field(default=600, ge=1, le=86400)
    """The cap on the delay between restarts."""
    jitter: float = Field(default=0.2, ge=0, le=1)
    """Fraction (0-1) of random spread around the delay."""


class GangPolicy(KgweModel):
    """All-or-nothing admission through an existing engine (native PodGroup or Kueue), never our own."""

    min_member: int | None = Field(default=None, ge=1, le=MAX_PODS)
    """Pods that must be placed together (at most the pod count; default: every pod)."""
    timeout_seconds: int = Field(default=300, ge=1, le=86400)
    """Not all pods scheduled this long after the run started: `PodsScheduled=False`, reason
    `GangTimeout` (and an Event); the pods keep waiting whole."""
    backend: GangBackend = "Auto"
    """The all-or-nothing engine: `Native` (PodGroup `scheduling.k8s.io/v1beta1`), `Kueue` (one Kueue pod
    group, docs/spec/gpuworkload.md#kueue), `None` (no all-or-nothing), `Auto` (Native, else Kueue). Where
    Kueue takes every Job of the namespace every batch run goes through Kueue, and `Native` is refused."""
    queue_name: str | None = Field(default=None, pattern=DNS_SUBDOMAIN_PATTERN)
    """Kueue LocalQueue (pod label `kueue.x-k8s.io/queue-name`; default: the namespace's LocalQueue
    `default`)."""


class Role(KgweModel):
    """One group of pods of a job (launcher, workers, ...)."""

    name: DnsLabel
    """The role's name (a DNS label), unique in the workload."""
    replicas: int = Field(default=1, ge=1, le=MAX_PODS)
    """Pods of this role (1-1024)."""
    gpu_requirements: GPURequirements | None = None
    """What each pod of this role needs (default: the workload's `gpuRequirements`)."""
    pod_template: dict[str, Any] | None = None
    """This role's core/v1 PodTemplateSpec (default: the workload's `podTemplate`)."""

    @field_validator("pod_template")
    @classmethod
    def _template(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            check_template(v)
        return v


class GPUWorkloadSpec(KgweModel):
    """What the job needs; `gpuRequirements` are per pod."""

    gpu_requirements: GPURequirements = Field(alias="gpuRequirements")
    """What each pod needs: whole GPUs, MIG instances of one profile, or a share of one GPU."""
    workload_type: WorkloadType = "Training"
    """Batch kinds `Training`, `DistributedTraining`, `Batch`, `HPC` become Indexed Jobs; `Inference`,
    `Interactive` become Deployments."""
    framework: str | None = None
    """E.g. PyTorch, TensorFlow, JAX, Triton. With `workloadType` it picks the WorkloadRuntime for a
    template without containers; without a runtime, `PyTorch` adds torchrun's rendezvous environment and
    `JAX` JAX's."""
    distributed_config: DistributedConfig | None = None
    """How the job is distributed. Without `roles` the pod count is `nodes`, else `replicas`, else
    `worldSize` ÷ processes per pod, else 1."""
    priority: int | str | None = None
    """An integer (the pods get the highest PriorityClass whose value is at most it; none: no class) or a
    PriorityClass name (must exist)."""
    scheduling_strategy: ScoringStrategy | None = None
    """A KGWE strategy: the pods use the first ScoringProfile (by name) with that strategy; none:
    `Admitted=False`, reason `NoScoringProfile`."""
    scoring_profile: str | None = None
    """A ScoringProfile by name (pod annotation `kgwe.nvidia.io/scoring-profile`); not together with
    `schedulingStrategy`."""
    team: LabelValue | None = None
    """Chargeback team: the pods get the label `kgwe.nvidia.io/team` (else metering charges the
    namespace); a Kubernetes label value, checked by the CRD too."""
    exclusive_access: bool = False
    """Only nodes whose GPUs are not time-sliced or MPS-shared (required node affinity: GFD
    `nvidia.com/gpu.replicas` absent or `1`)."""
    retry_policy: RetryPolicy = Field(default_factory=RetryPolicy)
    """Whole-gang restarts after a member pod fails."""
    checkpoint_interval: PositiveDuration | None = None
    """How often the job saves a checkpoint a restart resumes from (e.g. `30m`). KGWE takes no checkpoints;
    the cost reports' spot advice counts a batch job with checkpoints as able to move to spot, and an
    interruption as losing half an interval of work (docs/spec/pricingcatalog.md#spot-advice)."""
    roles: list[Role] | None = Field(default=None, min_length=1, max_length=8)
    """The pod groups of the job, at most 8 (default: one role `worker`)."""
    gang: GangPolicy = Field(default_factory=GangPolicy)
    """All-or-nothing placement through an existing engine (native PodGroup or Kueue)."""
    suspend: bool = False
    """No new pods: Jobs are suspended, Deployments scaled to 0, a Kueue run's pods deleted (its Kueue
    Workload with them); a workload suspended before admission creates nothing."""
    pod_template: dict[str, Any] = Field(default_factory=dict)
    """A core/v1 PodTemplateSpec, checked against the Kubernetes schema a Job's template is checked
    against; it must not set `nodeName`, a `kubernetes.io/hostname` nodeSelector or required node affinity
    on host names (KGWE places pods). Without containers the WorkloadRuntime supplies them and this
    template is laid over the runtime's (docs/spec/workloadruntime.md#how-a-workload-gets-its-template)."""
    runtime: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """A WorkloadRuntime by name, for roles whose template has no containers (default: the runtime
    serving `framework` and `workloadType`); an error when every role brings its containers."""

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
    """Where one pod of the current run was placed."""

    pod: str
    """The pod's name."""
    node: str
    """The node it runs on."""
    gpus: list[int] = Field(default_factory=list)
    """GPU indices it holds: what NVIDIA's device plugin allocated it, as the node agent reads them from the
    kubelet (the node's `kgwe.nvidia.io/gpu-pods` annotation); empty until the agent has read them."""


class WorkloadCost(KgweModel):
    """The pods' metered GPU usage priced with the PricingCatalog (needs metering)."""

    gpu_hours: str = Field(alias="gpuHours")
    """GPU-hours used, a decimal string."""
    amount: str
    """What they cost, a decimal string."""
    currency: str = DEFAULT_CURRENCY
    """The PricingCatalog's currency."""
    as_of: str | None = None
    """When the usage was last metered (RFC 3339)."""


class PredictedDuration(KgweModel):
    """Seconds: the expected (mean) duration and its quantiles (kgwe.optimizer.runtime)."""

    expected: int | None = None
    """The expected (mean) duration: what the expected cost is priced at."""
    p10: int | None = None
    """A run like it ends before this with probability 0.1."""
    p50: int | None = None
    """The median duration."""
    p90: int | None = None
    """A run like it ends before this with probability 0.9: what the cost's P90 is priced at."""


class PredictedCost(KgweModel):
    """The expected cost: the GPUs all pods hold × the expected duration × the PricingCatalog's price."""

    expected: str
    """What a run costs at the expected duration, a decimal string."""
    p90: str
    """What a run costs at the duration's P90, a decimal string."""
    currency: str = DEFAULT_CURRENCY
    """The PricingCatalog's currency."""
    gpus: str | None = None
    """Physical GPUs all the pods hold, as metering prices them (a MIG instance its share of the GPU)."""
    price_per_gpu_hour: str | None = Field(default=None, alias="pricePerGPUHour")
    """The catalog's on-demand price of one GPU-hour of `product`, a decimal string."""
    product: str | None = None
    """The GPU product priced."""
    note: str | None = None
    """How the price was chosen when the product priced is not the one the workload names (it names
    none, or one the catalog does not price: the catalog's dearest product)."""


class WorkloadPrediction(KgweModel):
    """What the optimizer predicted at admission (kgwe.optimizer.admission), with why."""

    duration_seconds: PredictedDuration = Field(default_factory=PredictedDuration, alias="durationSeconds")
    """How long a run is expected to take, from similar finished runs (docs/optimizer.md)."""
    cost: PredictedCost | None = None
    """What a run is expected to cost (absent when the PricingCatalog prices no product)."""
    reason: str = ""
    """Which finished runs the prediction comes from, e.g. `from 37 finished runs of runtime
    torch-distributed in ml-research (of 412 in all)`."""
    fallback: str | None = None
    """Set when no finished run was like it: what was used instead, and why."""
    samples: int = 0
    """Finished runs the prediction rests on."""
    predicted_at: str | None = Field(default=None, alias="predictedAt")
    """When it was predicted (RFC 3339)."""


class GPUWorkloadStatus(KgweModel):
    """What the controller did with the workload (written by it)."""

    model_config = ConfigDict(extra="allow")

    phase: Phase | None = None
    """Derived, for print columns: `Failed` if Failed, `Succeeded` if Complete, `Running` if PodsReady,
    `Scheduled` if PodsScheduled, else `Pending`."""
    observed_generation: int | None = None
    """The generation of the spec the status describes."""
    conditions: list[Condition] = Field(default_factory=list)
    """metav1.Conditions with `observedGeneration`: Admitted, PodsScheduled, KueueAdmitted (through Kueue),
    PodsReady, Complete, Failed, Suspended, GPUsHealthy (docs/spec/gpuworkload.md#status)."""
    placements: list[WorkloadPlacement] = Field(default_factory=list)
    """Where each pod of the current run was placed."""
    nodes: str | None = None
    """Nodes of the current run's pods, comma-separated."""
    gpus: int | None = None
    """GPU devices (whole GPUs, MIG instances or shares) all the pods request."""
    gang_backend: str | None = None
    """The all-or-nothing engine admission chose."""
    strategy: str | None = None
    """The scheduling strategy or ScoringProfile admission chose for the pods (`default` without one)."""
    retry_count: int = 0
    """Gang restarts so far."""
    next_retry_time: str | None = None
    """When the next run starts (RFC 3339), while a restart waits."""
    run: int = 0
    """The current attempt (0, then +1 per gang restart); its children carry it."""
    run_start_time: str | None = None
    """When the current run's children were created (RFC 3339; through Kueue, when Kueue admitted them); the
    gang timeout counts from it, and a finished run's duration, which the optimizer learns from."""
    runtime: str | None = None
    """The WorkloadRuntime roles without containers got at admission (absent when the workload brings its
    template)."""
    cost: WorkloadCost | None = None
    """The pods' metered usage priced with the PricingCatalog (needs metering)."""
    prediction: WorkloadPrediction | None = None
    """The duration and cost expected at admission, from the optimizer's runtime model (needs
    metering)."""


class GPUWorkload(KgweObject):
    """One GPU job, described by what it needs: KGWE's controller turns it into pods its scheduler places,
    all-or-nothing when it has more than one pod, admitted while the namespace's budget has room."""

    KIND: ClassVar[str] = "GPUWorkload"
    kind: Literal["GPUWorkload"] = "GPUWorkload"
    metadata: ClusterObjectMeta | None = None  # type: ignore[assignment]  # a manifest may leave it out; kubectl or CI adds it

    @property
    def name(self) -> str:
        return self.metadata.name if self.metadata else ""

    spec: GPUWorkloadSpec
    """What the job needs: GPUs per pod, pods, roles, gang, retries, template."""
    status: GPUWorkloadStatus | None = None
    """What the controller did: conditions, phase, placements, runs, cost."""


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
