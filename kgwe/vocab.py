"""Words and defaults KGWE's parts must agree on, in one place.

The policy models, the extender, the cost arithmetic, the renderer and the cluster I/O all import these, so
this module imports nothing but the standard library: the pure core may use it (the layering contract in
pyproject.toml checks that it stays so). Each `Literal` is the type the pydantic models use; the tuple
beside it is the same list for code that checks values at run time.
"""

from __future__ import annotations

from typing import Literal, get_args

# ---- Kubernetes resources, labels and annotations --------------------------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"  # whole GPUs (device plugin)
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"  # time-sliced GPUs (device plugin `renameByDefault`)
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # MIG instances, mixed strategy: nvidia.com/mig-1g.10gb


def mig_resource(profile: str) -> str:
    """The extended resource of a MIG profile; the device plugin writes `+me` as `.me`."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def is_gpu_resource(resource: str) -> bool:
    """A whole GPU, a share of one, or a MIG instance."""
    return resource in (GPU_RESOURCE, SHARED_GPU_RESOURCE) or resource.startswith(MIG_RESOURCE_PREFIX)


# Every object KGWE applies carries this label (and its own field manager).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "kgwe"


# GPU Feature Discovery labels and the MIG manager's labels (GPU Operator).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_FAMILY_LABEL = "nvidia.com/gpu.family"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"  # names a key of the device-plugin ConfigMap
GPU_COUNT_LABEL = "nvidia.com/gpu.count"  # GFD: physical GPUs, also when they are shared
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GFD: replicas per GPU (1 = not shared)
GPU_SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"  # GFD: none, time-slicing or mps

ANNOTATION_PREFIX = "kgwe.nvidia.io/"
# The NVIDIA GPU Operator's namespace by default: its MIG manager and device plugin read KGWE's configs there.
GPU_OPERATOR_NAMESPACE = "gpu-operator"
TOPOLOGY_ANNOTATION = ANNOTATION_PREFIX + "topology"  # on Nodes, written by `kgwe agent`
GPU_MILLI_ANNOTATION = ANNOTATION_PREFIX + "gpu-milli"  # on pods: thousandths of one shared GPU
# GPU health, written by `kgwe agent` (format: kgwe/topology/health.py): the unhealthy GPUs of a Node, the
# Node condition summarising them, and the taint set when every GPU of the Node is unhealthy.
GPU_HEALTH_ANNOTATION = ANNOTATION_PREFIX + "gpu-health"
GPU_HEALTH_CONDITION = "GPUHealthy"
GPU_UNHEALTHY_TAINT = ANNOTATION_PREFIX + "gpu-unhealthy"

# The audit trail (docs/audit.md): every object and Node the policy reconciler writes, and the Event that
# tells of the write, carries the policy commit that caused it and that commit's author (kgwe.audit.stamp).
# The leader appends what it wrote to a monthly log, <spec.reports.path>/AUDIT_FOLDER/<YYYY-MM>.jsonl
# (kgwe.audit.log).
REVISION_ANNOTATION = ANNOTATION_PREFIX + "revision"
REVISION_AUTHOR_ANNOTATION = ANNOTATION_PREFIX + "revision-author"
STAMP_ANNOTATIONS = (REVISION_ANNOTATION, REVISION_AUTHOR_ANNOTATION)
AUDIT_FOLDER = "audit"

# The ResourceQuota rendered from a GPUBudget in each of its namespaces (capped while the budget enforces).
BUDGET_QUOTA_NAME = "kgwe-budget"

# GPUWorkloads run only in namespaces that opt in with this label; in each, the controller binds the chart's
# ClusterRole WORKLOAD_WRITER_CLUSTERROLE (create Jobs, Deployments, Services, PodGroups) to itself with the
# RoleBinding WORKLOAD_ROLEBINDING. The chart's admission policies spell these names too.
WORKLOADS_NAMESPACE_LABEL = ANNOTATION_PREFIX + "workloads"
WORKLOADS_ENABLED = "enabled"
WORKLOAD_WRITER_CLUSTERROLE = "kgwe-workload-writer"
WORKLOAD_ROLEBINDING = "kgwe-workloads"

# ---- Scoring (ScoringProfile, the extender) --------------------------------------------------------------
ScoringStrategy = Literal[
    "BinPack", "Spread", "LeastLoaded", "BestFit", "CostOptimized", "RoundRobin", "Random", "Priority"
]
STRATEGIES: tuple[str, ...] = get_args(ScoringStrategy)
# With the fragmentation term, BestFit packed the openb trace best (`kgwe simulate`).
DEFAULT_STRATEGY: ScoringStrategy = "BestFit"
# The seeds' strategy words (GPU_Orchestrator, AgentaFlow), normalised (lower case, no "_", "-" or space),
# onto KGWE's: `kgwe convert` maps them and `kgwe strategy` accepts them.
SEED_STRATEGY_WORDS: dict[str, ScoringStrategy] = {
    "binpack": "BinPack",
    "packed": "BinPack",
    "spread": "Spread",
    "leastloaded": "LeastLoaded",
    "leastutilized": "LeastLoaded",
    "mostavailable": "LeastLoaded",
    "bestfit": "BestFit",
    "costoptimized": "CostOptimized",
    "cost": "CostOptimized",
    "roundrobin": "RoundRobin",
    "random": "Random",
    "priority": "Priority",
    "prioritybased": "Priority",
}


def strategy_for_word(word: str) -> ScoringStrategy | None:
    """KGWE's strategy for a word as KGWE or a seed spells it (`best_fit`, `leastLoaded`), else None."""
    return SEED_STRATEGY_WORDS.get("".join(c for c in word if c not in "-_ \t").lower())


# The seeds' own GPUWorkload API versions (`kgwe convert` reads them): GPU_Orchestrator's, AgentaFlow's.
SEED_WORKLOAD_API_VERSIONS: dict[str, str] = {
    "gpu.warp.dev/v1alpha1": "GPU_Orchestrator",
    "agentaflow.io/v1": "AgentaFlow",
}

# What a pod may ask of its GPU set (annotation kgwe.nvidia.io/topology-preference; GPUWorkload).
TopologyPreference = Literal["NVLinkOptimal", "SameNUMA", "SamePCIeSwitch", "None"]
TOPOLOGY_PREFERENCES: tuple[str, ...] = get_args(TopologyPreference)

# Relative weights of the score components.
DEFAULT_TOPOLOGY_WEIGHT = 40
DEFAULT_RESOURCE_WEIGHT = 35
DEFAULT_BALANCE_WEIGHT = 25
# Weight of the fragmentation-aware (FGD) term: the openb replay showed it raising the GPU allocation ratio
# at 130% load, so it is on by default; 0 turns it off.
DEFAULT_FRAGMENTATION = 50
# kube-scheduler's `extenders[]` entry: weight of the extender's prioritize score, and how long
# kube-scheduler waits for a filter/prioritize answer (the rendered KubeSchedulerConfiguration uses it).
DEFAULT_EXTENDER_WEIGHT = 5
DEFAULT_HTTP_TIMEOUT_SECONDS = 5
# kube-scheduler's percentageOfNodesToScore in the rendered configuration. 100 = every feasible node reaches
# the extender: a pod that only KGWE's own checks fit (a GPU share, a product annotation) always finds its
# node. 0 = kube-scheduler's adaptive sample (420 of 1,000 nodes): less scheduler CPU per pod at scale, but
# 0.08-0.7% of such pods miss a fitting node outside their sample and wait for a retry. Figures:
# docs/scheduler.md.
DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE = 100

# ---- Cost (PricingCatalog, chargeback) ------------------------------------------------------------------
DEFAULT_CURRENCY = "USD"
MigPricing = Literal["ComputeSlices", "MemorySlices", "Max"]
MIG_PRICING: tuple[str, ...] = get_args(MigPricing)
DEFAULT_MIG_PRICING: MigPricing = "ComputeSlices"
IdleCost = Literal["Separate", "ShareByAllocation"]
IDLE_COST: tuple[str, ...] = get_args(IdleCost)
DEFAULT_IDLE_COST: IdleCost = "Separate"
IDLE_KEY = "__idle__"  # the chargeback line of idle capacity (OpenCost's name)
# What the spot advice assumes when the PricingCatalog does not say (spotInterruptionRate): a fifth of spot
# nodes reclaimed in a month, the lower edge of the highest band (">20%") AWS's Spot Instance Advisor reports.
DEFAULT_SPOT_INTERRUPTION_PERCENT = 20

# ---- Reports (PolicyRepository.spec.reports) -------------------------------------------------------------
# `reports:` absent = no cost reports; present without a schedule = every day at 06:00 UTC.
DEFAULT_REPORT_SCHEDULE = "0 6 * * *"

# MIG rebalancing (MIGStrategy spec.partitionStrategy, docs/mig-rebalancing.md)
MIN_REBALANCE_INTERVAL_SECONDS = 5  # shorter would re-plan faster than a MIG manager can apply a layout
MAX_REBALANCE_INTERVAL_SECONDS = 24 * 3600
DEFAULT_REBALANCE_MAX_GPUS = "25%"  # GPUs one rebalance decision may repartition, of the pool's GPUs
DEFAULT_STABILIZATION_INTERVALS = 3  # falling demand is followed after this many intervals without it
DEFAULT_REPORTS_PATH = "reports"
