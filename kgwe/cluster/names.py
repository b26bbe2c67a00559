"""Names KGWE puts on and reads from the cluster. Those the pure core shares (GPU resources, GFD and MIG
manager labels, annotations it reads) live in kgwe.vocab and are re-exported here."""

from __future__ import annotations

# shared with the pure core, re-exported here so cluster code finds every name in one module
from kgwe.vocab import ANNOTATION_PREFIX
from kgwe.vocab import BUDGET_QUOTA_NAME as BUDGET_QUOTA_NAME
from kgwe.vocab import GPU_RESOURCE as GPU_RESOURCE
from kgwe.vocab import MANAGED_BY_LABEL as MANAGED_BY_LABEL
from kgwe.vocab import MANAGED_BY_VALUE as MANAGED_BY_VALUE
from kgwe.vocab import MIG_CONFIG_LABEL as MIG_CONFIG_LABEL
from kgwe.vocab import MIG_RESOURCE_PREFIX as MIG_RESOURCE_PREFIX
from kgwe.vocab import MIG_STATE_LABEL as MIG_STATE_LABEL
from kgwe.vocab import SHARED_GPU_RESOURCE as SHARED_GPU_RESOURCE
from kgwe.vocab import TOPOLOGY_ANNOTATION as TOPOLOGY_ANNOTATION
from kgwe.vocab import WORKLOAD_ROLEBINDING as WORKLOAD_ROLEBINDING
from kgwe.vocab import WORKLOAD_WRITER_CLUSTERROLE as WORKLOAD_WRITER_CLUSTERROLE
from kgwe.vocab import WORKLOADS_ENABLED as WORKLOADS_ENABLED
from kgwe.vocab import WORKLOADS_NAMESPACE_LABEL as WORKLOADS_NAMESPACE_LABEL
from kgwe.vocab import is_gpu_resource as is_gpu_resource

FIELD_MANAGER = "kgwe-controller"
# CRD coordinates (group kgwe.API_GROUP).
CRD_VERSION = "v1"
POLICY_REPOSITORY_PLURAL = "policyrepositories"
# Set by a standby replica that received a webhook push (the Service routes to any replica); the leader
# sees the new value on its next tick and reconciles at once (like Flux's reconcile.fluxcd.io/requestedAt).
RECONCILE_REQUESTED_AT_ANNOTATION = ANNOTATION_PREFIX + "reconcile-requested-at"
# Which PolicyRepository an object came from ("<namespace>.<name>"), for inventory and prune.
REPOSITORY_LABEL = ANNOTATION_PREFIX + "policy-repository"
# `disabled` protects an object from prune (same idea as Flux's kustomize.toolkit.fluxcd.io/prune).
# A PolicyRepository may read only Secrets carrying this label with the value "true": a tenant who may create
# PolicyRepositories must not be able to send any other Secret of the namespace to a Git server of theirs.
GIT_CREDENTIALS_LABEL = ANNOTATION_PREFIX + "git-credentials"
# ...and names the hosts its credentials are for ("github.com, git.example.com:8443"): they are sent to no
# other host, whatever URL a PolicyRepository names.
GIT_HOSTS_ANNOTATION = ANNOTATION_PREFIX + "git-hosts"

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

# The KGWE scheduler: a second kube-scheduler (Deployment `kgwe-scheduler`) whose profile has this
# schedulerName and whose configuration is the rendered ConfigMap below; GPU pods reach it by naming it.
SCHEDULER_NAME = "kgwe-scheduler"
SCHEDULER_DEPLOYMENT = "kgwe-scheduler"
SCHEDULER_CONFIGMAP = "kgwe-scheduler-config"
SCHEDULER_CONFIG_KEY = "scheduler-config.yaml"
# The policy repository's WorkloadRuntimes, rendered for the GPUWorkload reconciler (in KGWE's namespace).
RUNTIMES_CONFIGMAP = "kgwe-runtimes"
RUNTIMES_CONFIG_KEY = "runtimes.json"
# Pod-template annotation of the kgwe-scheduler Deployment: kube-scheduler never rereads its config, so a
# new hash here rolls its pods onto the new configuration.
SCHEDULER_CONFIG_HASH_ANNOTATION = ANNOTATION_PREFIX + "scheduler-config-hash"
# Namespaces opt their GPU pods into the KGWE scheduler with this label (the admission webhook's selector).
SCHEDULING_NAMESPACE_LABEL = ANNOTATION_PREFIX + "scheduling"
SCHEDULING_ENABLED = "enabled"
DEFAULT_SCHEDULER_NAME = "default-scheduler"

# The device-plugin sharing rollout's own stamps (a node may also be in a MIG pool with MIG disabled): when
# KGWE set nvidia.com/device-plugin.config, and that KGWE cordoned the node to switch it.
SHARING_REQUESTED_AT_ANNOTATION = ANNOTATION_PREFIX + "device-plugin-config-requested-at"
SHARING_CORDONED_ANNOTATION = ANNOTATION_PREFIX + "cordoned-for-device-plugin-config"

# The PodTemplatePolicies of the policy repository, rendered into KGWE's namespace for the GPUWorkload
# controller (JSON under the key below); absent, every field a policy could allow is refused.
POD_TEMPLATE_POLICY_CONFIGMAP = "kgwe-pod-template-policy"
POD_TEMPLATE_POLICY_KEY = "policies.json"
