"""Words, names and defaults KGWE's parts must agree on, in one place.

Every name KGWE puts on or reads from the cluster (its API, the GPU Operator's labels, KGWE's own labels,
annotations and objects) and every default the policy models and the code paths behind them share. The
policy models, the extender, the cost arithmetic, the renderer and the cluster I/O all import these, so this
module imports nothing but the standard library: the pure core may use it (the contracts in pyproject.toml
check that it stays so). Each `Literal` is the type the pydantic models use; the tuple beside it is the same
list for code that checks values at run time. tests/test_vocab.py fails when another module spells one of
these values itself.
"""

from __future__ import annotations

from typing import Literal, get_args

# ---- KGWE's API and where it runs ----------------------------------------------------------------------
KgweApiVersion = Literal["kgwe.nvidia.io/v1"]  # of every KGWE kind (the policy models' type)
API_VERSION: KgweApiVersion = get_args(KgweApiVersion)[0]
API_GROUP, _, CRD_VERSION = API_VERSION.partition("/")
POLICY_REPOSITORY_PLURAL = "policyrepositories"
GPU_WORKLOAD_PLURAL = "gpuworkloads"
GPU_WORKLOAD_RESOURCE = f"gpuworkload.{API_GROUP}"  # what kubectl calls the kind (`kubectl get ...`)
KGWE_NAMESPACE = "kgwe-system"  # the chart's namespace: KGWE's processes and the ConfigMaps it renders
GPU_OPERATOR_NAMESPACE = "gpu-operator"  # where the GPU Operator's MIG manager and device plugin read config
# The controller's name: its Deployment, leader Lease, Event source and trace service; and, as the field
# manager of server-side apply, the owner of every field KGWE writes.
CONTROLLER_NAME = "kgwe-controller"
FIELD_MANAGER = CONTROLLER_NAME
EXTENDER_NAME = "kgwe-extender"  # the extender's Deployment and Service, and its trace service
COMPONENT_SELECTOR = "app.kubernetes.io/name=kgwe"  # the chart's pods, of every KGWE component

# ---- Kubernetes resources ------------------------------------------------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"  # whole GPUs (device plugin)
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"  # time-sliced GPUs (device plugin `renameByDefault`)
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # MIG instances, mixed strategy: nvidia.com/mig-1g.10gb
NVIDIA_RESOURCE_PREFIX = "nvidia.com/"  # of every resource and label of NVIDIA's device plugin and GFD
# The characters of the random suffixes Kubernetes appends to generated names (generateName, a ReplicaSet's
# pod-template-hash): no vowels, no 0/1/3 (k8s.io/apimachinery/pkg/util/rand).
GENERATED_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def mig_resource(profile: str) -> str:
    """The extended resource of a MIG profile; the device plugin writes `+me` as `.me`."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def is_gpu_resource(resource: str) -> bool:
    """A whole GPU, a share of one, or a MIG instance."""
    return resource in (GPU_RESOURCE, SHARED_GPU_RESOURCE) or resource.startswith(MIG_RESOURCE_PREFIX)


def quota_key(resource: str) -> str:
    """The key of a resource in a ResourceQuota's `spec.hard`: extended resources (any name with a domain,
    `nvidia.com/gpu`) exist in quota only as `requests.<name>`."""
    return resource if resource.startswith("requests.") or "/" not in resource else f"requests.{resource}"


# Every object KGWE applies carries this label (and its own field manager).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "kgwe"

# ---- The GPU Operator's labels: GPU Feature Discovery, the MIG manager, the device plugin -----------------
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"  # GFD: "true" on every node with NVIDIA GPUs
GPU_NODE_SELECTOR = f"{GPU_PRESENT_LABEL}=true"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_FAMILY_LABEL = "nvidia.com/gpu.family"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB
GPU_COUNT_LABEL = "nvidia.com/gpu.count"  # GFD: physical GPUs, also when they are shared
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GFD: replicas per GPU (1 = not shared)
GPU_SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"  # GFD: none, time-slicing or mps
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"  # GFD: single or mixed
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
# The GPU Operator runs its operand (device-plugin, mig-manager, ...) on a node while this + name is "true".
GPU_DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
MIG_MANAGER_DEPLOY_LABEL = GPU_DEPLOY_LABEL_PREFIX + "mig-manager"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"  # names a key of the device-plugin ConfigMap
# The mig-parted configs every rendered MIG config file holds besides KGWE's own layouts (NVIDIA's names).
MIG_ALL_DISABLED = "all-disabled"
MIG_ENABLED_KEY = "mig-enabled"  # per device of a mig-parted config: MIG mode on
MIG_DEVICES_KEY = "mig-devices"  # per device of a mig-parted config: profile -> count

# ---- KGWE's labels and annotations -----------------------------------------------------------------------
ANNOTATION_PREFIX = "kgwe.nvidia.io/"
TOPOLOGY_ANNOTATION = ANNOTATION_PREFIX + "topology"  # on Nodes, written by `kgwe agent`
GPU_PODS_ANNOTATION = ANNOTATION_PREFIX + "gpu-pods"  # on Nodes, written by `kgwe agent`: GPUs held by pods
NODE_PRIORITY_LABEL = ANNOTATION_PREFIX + "node-priority"  # on Nodes: the Priority strategy's order
# GPU health, written by `kgwe agent` (format: kgwe/topology/health.py): the unhealthy GPUs of a Node, the
# Node condition summarising them, and the taint set when every GPU of the Node is unhealthy.
GPU_HEALTH_ANNOTATION = ANNOTATION_PREFIX + "gpu-health"
GPU_HEALTH_CONDITION = "GPUHealthy"
GPU_UNHEALTHY_TAINT = ANNOTATION_PREFIX + "gpu-unhealthy"

# What a pod asks of the extender (annotations on pods; docs/scheduler.md), and what the extender answers.
GPU_MILLI_ANNOTATION = ANNOTATION_PREFIX + "gpu-milli"  # thousandths of one shared GPU
GPU_PRODUCT_ANNOTATION = ANNOTATION_PREFIX + "gpu-product"
GPU_FAMILY_ANNOTATION = ANNOTATION_PREFIX + "gpu-family"
MIN_MEMORY_ANNOTATION = ANNOTATION_PREFIX + "min-memory-gb"
TOPOLOGY_PREFERENCE_ANNOTATION = ANNOTATION_PREFIX + "topology-preference"
MIN_BANDWIDTH_ANNOTATION = ANNOTATION_PREFIX + "min-bandwidth-gbps"
SCORING_PROFILE_ANNOTATION = ANNOTATION_PREFIX + "scoring-profile"
GPU_INDEX_ANNOTATION = ANNOTATION_PREFIX + "gpu-index"  # the GPUs the extender chose for a bound pod

# The GPUWorkload controller's labels on the objects of a workload.
WORKLOAD_LABEL = ANNOTATION_PREFIX + "workload"
ROLE_LABEL = ANNOTATION_PREFIX + "role"
RUN_LABEL = ANNOTATION_PREFIX + "run"
# The team a Namespace's GPU time is charged to (also copied onto a GPUWorkload's pods).
TEAM_LABEL = ANNOTATION_PREFIX + "team"
# `kgwe convert`: the model a seed workload named, kept as a label of the converted GPUWorkload.
MODEL_LABEL = ANNOTATION_PREFIX + "model"
# On Nodes: the node pool the sample policy repository's GPUInventory and MIGStrategies select (the demo).
POOL_LABEL = ANNOTATION_PREFIX + "pool"
# On Nodes: `spot` marks spot or preemptible capacity (KGWE's own label among the clouds' ones it reads).
CAPACITY_TYPE_LABEL = ANNOTATION_PREFIX + "capacity-type"

# The audit trail (docs/audit.md): every object and Node the policy reconciler writes, and the Event that
# tells of the write, carries the policy commit that caused it and that commit's author (kgwe.audit.stamp).
# The leader appends what it wrote to a monthly log, <spec.reports.path>/AUDIT_FOLDER/<YYYY-MM>.jsonl
# (kgwe.audit.log).
REVISION_ANNOTATION = ANNOTATION_PREFIX + "revision"
REVISION_AUTHOR_ANNOTATION = ANNOTATION_PREFIX + "revision-author"
STAMP_ANNOTATIONS = (REVISION_ANNOTATION, REVISION_AUTHOR_ANNOTATION)
AUDIT_FOLDER = "audit"

# The ResourceQuota rendered from a GPUBudget in each of its namespaces (capped while the budget enforces),
# and its annotation naming that GPUBudget.
BUDGET_QUOTA_NAME = "kgwe-budget"
# GPUBudget spec.predictedCostAdmission: what a budget does with a GPUWorkload whose expected cost (the
# optimizer's runtime model x the catalog's price) exceeds what remains of it this period; Off by default
PredictedCostAdmission = Literal["Off", "Hold", "Refuse"]
PREDICTED_COST_ADMISSION: tuple[str, ...] = get_args(PredictedCostAdmission)
DEFAULT_PREDICTED_COST_ADMISSION: PredictedCostAdmission = "Off"
BUDGET_ANNOTATION = ANNOTATION_PREFIX + "budget"

# GPUWorkloads run only in namespaces that opt in with this label; in each, the controller binds the chart's
# ClusterRole WORKLOAD_WRITER_CLUSTERROLE (create Jobs, Deployments, Services, PodGroups) to itself with the
# RoleBinding WORKLOAD_ROLEBINDING. The chart's admission policies spell these names too.
WORKLOADS_NAMESPACE_LABEL = ANNOTATION_PREFIX + "workloads"
WORKLOADS_ENABLED = "enabled"
WORKLOAD_WRITER_CLUSTERROLE = "kgwe-workload-writer"
WORKLOAD_ROLEBINDING = "kgwe-workloads"

# Offboarding (docs/offboarding.md): every PolicyRepository carries this finalizer, so deleting one lets the
# controller release what it wrote first. `spec.deletionPolicy` says how: Delete (the default) removes it
# all, returning nodes' GPU Operator labels only while their GPUs are idle; Retain leaves the policy in
# force and releases only what would otherwise stay stuck without KGWE (Enforce caps, KGWE's cordons).
POLICY_REPOSITORY_FINALIZER = ANNOTATION_PREFIX + "release"
DeletionPolicy = Literal["Delete", "Retain"]
DELETION_POLICIES: tuple[str, ...] = get_args(DeletionPolicy)
DELETE_POLICY, RETAIN_POLICY = DELETION_POLICIES
DEFAULT_DELETION_POLICY: DeletionPolicy = "Delete"
# On a `kgwe-budget` ResourceQuota capped by an Enforce budget: the budget's own `spec.hard` (JSON), so the
# cap can be lifted from the cluster alone when the PolicyRepository goes with deletionPolicy Retain.
UNCAPPED_HARD_ANNOTATION = ANNOTATION_PREFIX + "uncapped-hard"

# Field managers of KGWE's other writers: the agent (its Node labels, annotations, condition and taint, and
# its Events' source; the chart's post-delete hook removes what this manager owns) and the chart's hooks
# (the PolicyRepository it creates with policyRepository.create).
AGENT_FIELD_MANAGER = "kgwe-agent"
CHART_FIELD_MANAGER = "kgwe-chart"

# Set by a standby replica that received a webhook push (the Service routes to any replica); the leader
# sees the new value on its next tick and reconciles at once (like Flux's reconcile.fluxcd.io/requestedAt).
RECONCILE_REQUESTED_AT_ANNOTATION = ANNOTATION_PREFIX + "reconcile-requested-at"
# Which PolicyRepository an object came from ("<namespace>.<name>"), for inventory and prune.
REPOSITORY_LABEL = ANNOTATION_PREFIX + "policy-repository"
# A PolicyRepository may read only Secrets carrying this label with the value "true": a tenant who may create
# PolicyRepositories must not be able to send any other Secret of the namespace to a Git server of theirs.
GIT_CREDENTIALS_LABEL = ANNOTATION_PREFIX + "git-credentials"
# ...and names the hosts its credentials are for ("github.com, git.example.com:8443"): they are sent to no
# other host, whatever URL a PolicyRepository names.
GIT_HOSTS_ANNOTATION = ANNOTATION_PREFIX + "git-hosts"
# `disabled` protects an object from prune (same idea as Flux's kustomize.toolkit.fluxcd.io/prune).
PRUNE_ANNOTATION = ANNOTATION_PREFIX + "prune"
PRUNE_DISABLED = "disabled"
# Hash of the desired object as last applied; lets a later reconcile tell drift from a policy change.
DESIRED_HASH_ANNOTATION = ANNOTATION_PREFIX + "desired-hash"


def repository_label_value(namespace: str, name: str) -> str:
    return f"{namespace}.{name}"[:63].rstrip(".-_")


# When KGWE set the label (RFC 3339 UTC): the start of the success timeout, readable after a restart.
REQUESTED_AT_ANNOTATION = ANNOTATION_PREFIX + "mig-config-requested-at"
# Present while KGWE holds the node cordoned for a layout change (value: the config it is draining for),
# so KGWE uncordons only nodes it cordoned itself, never an administrator's cordon.
CORDONED_ANNOTATION = ANNOTATION_PREFIX + "cordoned-for-mig-config"
# Which rollout of its pool the node's current label belongs to ("<pool>:<digest of the MIGStrategy>"): while
# it matches the pool's current strategy, the planner keeps the node's layout, so a node changes at most once
# per strategy revision whatever else happens in the pool.
ROLLOUT_REVISION_ANNOTATION = ANNOTATION_PREFIX + "mig-rollout-revision"
# Set by a person on a node whose MIG change failed (or timed out): "I have looked at it; let the pool go on".
RETRY_ANNOTATION = ANNOTATION_PREFIX + "mig-retry"
# Written by KGWE when it takes a RETRY_ANNOTATION: the requested-at stamp of the attempt it acknowledges,
# so the acknowledgement covers that failure only, never a later one.
ACKNOWLEDGED_ANNOTATION = ANNOTATION_PREFIX + "mig-failure-acknowledged"
# How long a node may take to report a new MIG layout or device-plugin config (a MIGStrategy's or
# GPUSharingStrategy's `rollout.pendingTimeout` when it sets none, and offboarding's) before it stops
# its pool.
DEFAULT_PENDING_TIMEOUT_SECONDS = 900.0
# The device-plugin sharing rollout's own stamps (a node may also be in a MIG pool with MIG disabled): when
# KGWE set nvidia.com/device-plugin.config, and that KGWE cordoned the node to switch it.
SHARING_REQUESTED_AT_ANNOTATION = ANNOTATION_PREFIX + "device-plugin-config-requested-at"
SHARING_CORDONED_ANNOTATION = ANNOTATION_PREFIX + "cordoned-for-device-plugin-config"

# The local cluster's simulated kubelets (kwok) keep a pod with this annotation Running until someone writes
# its end status (kgwe/localcluster/kwok-stages.yaml spells it in its Stage selector).
KWOK_HOLD_ANNOTATION = ANNOTATION_PREFIX + "test-hold"

# ---- The objects KGWE renders --------------------------------------------------------------------------
# The KGWE scheduler: a second kube-scheduler (Deployment `kgwe-scheduler`) whose profile has this
# schedulerName and whose configuration is the rendered ConfigMap below; GPU pods reach it by naming it.
SCHEDULER_NAME = "kgwe-scheduler"
SCHEDULER_DEPLOYMENT = SCHEDULER_NAME
SCHEDULER_CONFIGMAP = "kgwe-scheduler-config"
SCHEDULER_CONFIG_KEY = "scheduler-config.yaml"
# Pod-template annotation of the kgwe-scheduler Deployment: kube-scheduler never rereads its config, so a
# new hash here rolls its pods onto the new configuration.
SCHEDULER_CONFIG_HASH_ANNOTATION = ANNOTATION_PREFIX + "scheduler-config-hash"
# The extender runs as a container of each kgwe-scheduler pod by default and listens on the pod's loopback
# here (plain HTTP: only containers of that pod reach it); the standalone extender Service serves mutual TLS
# on EXTENDER_TLS_PORT.
EXTENDER_PORT = 8888
EXTENDER_TLS_PORT = 8443
# Where the controller and the extender serve GET /metrics over TLS (a bearer token never crosses the network
# in clear; kgwe.httpd.metrics_port), with the certificate in METRICS_TLS_SECRET.
METRICS_TLS_PORT = 9443
# Namespaces opt their GPU pods into the KGWE scheduler with this label (the admission webhook's selector).
SCHEDULING_NAMESPACE_LABEL = ANNOTATION_PREFIX + "scheduling"
SCHEDULING_ENABLED = "enabled"
DEFAULT_SCHEDULER_NAME = "default-scheduler"
# The ScoringProfiles, rendered for the extender and the GPUWorkload controller (JSON under the key below).
SCORING_CONFIGMAP = "kgwe-scoring"
SCORING_CONFIG_KEY = "profiles.json"
# The policy repository's WorkloadRuntimes, rendered for the GPUWorkload reconciler (in KGWE's namespace).
RUNTIMES_CONFIGMAP = "kgwe-runtimes"
RUNTIMES_CONFIG_KEY = "runtimes.json"
# The PodTemplatePolicies of the policy repository, rendered into KGWE's namespace for the GPUWorkload
# controller (JSON under the key below); absent, every field a policy could allow is refused.
POD_TEMPLATE_POLICY_CONFIGMAP = "kgwe-pod-template-policy"
POD_TEMPLATE_POLICY_KEY = "policies.json"
# KGWE's own certificates (kgwe.certs.rotation decides, kgwe.reconcile.certificates writes): the CA's Secret,
# the admission webhook's serving certificate, /metrics' serving certificate, and, with the standalone
# extender over mutual TLS, the extender's serving certificate and kube-scheduler's client certificate; each
# Secret is kubernetes.io/tls with tls.crt, tls.key and ca.crt (the CA bundle). Services and the webhook
# configuration they are for.
CA_SECRET = "kgwe-ca"
WEBHOOK_TLS_SECRET = "kgwe-webhook-tls"
EXTENDER_TLS_SECRET = "kgwe-extender-tls"
EXTENDER_CLIENT_SECRET = "kgwe-scheduler-extender-client"
METRICS_TLS_SECRET = "kgwe-metrics-tls"  # for the controller's and the extender's Services
CONTROLLER_SERVICE = CONTROLLER_NAME
WEBHOOK_NAME = "kgwe-webhook"  # the admission webhook's Deployment and Service
WEBHOOK_SERVICE = WEBHOOK_NAME
EXTENDER_SERVICE = EXTENDER_NAME
WEBHOOK_CONFIGURATION = "kgwe-scheduling"
CONTROLLER_DEPLOYMENT = CONTROLLER_NAME  # owns the certificate Secrets: they go when KGWE is uninstalled
WEBHOOK_DEPLOYMENT = WEBHOOK_NAME
EXTENDER_DEPLOYMENT = EXTENDER_NAME  # the standalone extender
# Pod-template annotation KGWE sets when it creates a certificate Secret the Deployment's pods wait for: the
# kubelet fills an optional Secret volume that appeared after the pod started only at its next periodic
# sync, a new pod mounts it at once.
CERTIFICATE_ISSUED_ANNOTATION = ANNOTATION_PREFIX + "certificate-issued"
# Its field manager: not FIELD_MANAGER, whose server-side apply of kgwe-scheduler's config hash would drop it.
CERTIFICATES_FIELD_MANAGER = "kgwe-certificates"
# The GPU Operator's configuration KGWE renders into GPU_OPERATOR_NAMESPACE: the MIG manager's mig-parted
# config and the device plugin's sharing configs.
MIG_PARTED_CONFIGMAP = "kgwe-mig-parted-config"
DEVICE_PLUGIN_CONFIGMAP = "kgwe-device-plugin-config"
# The names of the configs KGWE renders into those ConfigMaps (mig-parted configs, device-plugin configs)
# start with this; a node labelled with any other config is not KGWE's to change.
CONFIG_NAME_PREFIX = "kgwe-"

# ---- Kueue (docs/facts/kueue.md): the names of v0.17 that KGWE reads and writes ---------------------------
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_API_VERSION = KUEUE_GROUP + "/v1beta2"
KUEUE_QUEUE_LABEL = KUEUE_GROUP + "/queue-name"  # a pod's (or job's) LocalQueue
KUEUE_GROUP_LABEL = KUEUE_GROUP + "/pod-group-name"  # plain pods admitted together; their Workload's name
KUEUE_GROUP_TOTAL_ANNOTATION = KUEUE_GROUP + "/pod-group-total-count"
KUEUE_MANAGED_LABEL = KUEUE_GROUP + "/managed"  # Kueue's mark on the pods it gates
KUEUE_DEFAULT_LOCAL_QUEUE = "default"  # Kueue gives a queue-less job or pod this LocalQueue when it exists
KUEUE_NAMESPACE = "kueue-system"  # where Kueue's manifests and chart install it
KUEUE_CONFIGMAP = "kueue-manager-config"  # its Configuration, under the key below
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
KUEUE_POD_FRAMEWORK = "pod"  # integrations.frameworks entries KGWE's children depend on
KUEUE_JOB_FRAMEWORK = "batch/job"

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

# ---- The optimizer's workload classes (kgwe.optimizer.classes): what a pod's telemetry looks like ----------
WORKLOAD_CLASS_TRAINING = "training"
WORKLOAD_CLASS_INFERENCE = "inference"
WORKLOAD_CLASS_INTERACTIVE = "interactive"
WORKLOAD_CLASS_IDLE = "idle holder"
WORKLOAD_CLASS_UNKNOWN = "unknown"
WORKLOAD_CLASSES = (
    WORKLOAD_CLASS_TRAINING,
    WORKLOAD_CLASS_INFERENCE,
    WORKLOAD_CLASS_INTERACTIVE,
    WORKLOAD_CLASS_IDLE,
    WORKLOAD_CLASS_UNKNOWN,
)
# A GPUWorkload's declared workloadType (kgwe.policy.gpu_workload.WorkloadType) as the class it should show.
WORKLOAD_TYPE_CLASSES = {
    "Training": WORKLOAD_CLASS_TRAINING,
    "DistributedTraining": WORKLOAD_CLASS_TRAINING,
    "Batch": WORKLOAD_CLASS_TRAINING,
    "HPC": WORKLOAD_CLASS_TRAINING,
    "Inference": WORKLOAD_CLASS_INFERENCE,
    "Interactive": WORKLOAD_CLASS_INTERACTIVE,
}
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
