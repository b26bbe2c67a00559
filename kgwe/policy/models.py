"""Every KGWE kind in one place, by `kind` name (apiVersion kgwe.nvidia.io/v1)."""

from __future__ import annotations

from kgwe.policy.base import ClusterObjectMeta, KgweModel, KgweObject, ObjectMeta
from kgwe.policy.budget import BudgetAlert, BudgetLimit, GPUBudget, GPUBudgetSpec
from kgwe.policy.cluster_kinds import (
    Condition,
    PolicyRepository,
    PolicyRepositorySpec,
    PolicyRepositoryStatus,
)
from kgwe.policy.gpu_workload import (
    DistributedConfig,
    GPURequirements,
    GPUWorkload,
    GPUWorkloadSpec,
    GPUWorkloadStatus,
    TopologyRequirement,
)
from kgwe.policy.inventory import GPUDeviceState, GPUInventory, GPUInventorySpec, InventoryNode
from kgwe.policy.mig_strategy import MIGStrategy, MIGStrategySpec, PartitionStrategy, ProfileShare, Rollout
from kgwe.policy.pod_template_policy import PodTemplatePolicy, PodTemplatePolicySpec
from kgwe.policy.pricing import GPUPrice, PricingCatalog, PricingCatalogSpec
from kgwe.policy.scoring_profile import ExtenderSettings, ScoringProfile, ScoringProfileSpec, Weights
from kgwe.policy.sharing_strategy import GPUSharingStrategy, GPUSharingStrategySpec
from kgwe.policy.workload_runtime import WorkloadRuntime, WorkloadRuntimeSpec

POLICY_KINDS: tuple[type[KgweObject], ...] = (
    MIGStrategy,
    GPUSharingStrategy,
    ScoringProfile,
    GPUBudget,
    PricingCatalog,
    GPUInventory,
    WorkloadRuntime,
    PodTemplatePolicy,
)
CLUSTER_KINDS: tuple[type[KgweObject], ...] = (PolicyRepository, GPUWorkload)
KINDS: dict[str, type[KgweObject]] = {k.KIND: k for k in (*POLICY_KINDS, *CLUSTER_KINDS)}

__all__ = [
    "CLUSTER_KINDS",
    "KINDS",
    "POLICY_KINDS",
    "BudgetAlert",
    "BudgetLimit",
    "ClusterObjectMeta",
    "Condition",
    "DistributedConfig",
    "ExtenderSettings",
    "GPUBudget",
    "GPUBudgetSpec",
    "GPUDeviceState",
    "GPUInventory",
    "GPUInventorySpec",
    "GPUPrice",
    "GPURequirements",
    "GPUSharingStrategy",
    "GPUSharingStrategySpec",
    "GPUWorkload",
    "GPUWorkloadSpec",
    "GPUWorkloadStatus",
    "InventoryNode",
    "KgweModel",
    "KgweObject",
    "MIGStrategy",
    "MIGStrategySpec",
    "ObjectMeta",
    "PartitionStrategy",
    "PodTemplatePolicy",
    "PodTemplatePolicySpec",
    "PolicyRepository",
    "PolicyRepositorySpec",
    "PolicyRepositoryStatus",
    "PricingCatalog",
    "PricingCatalogSpec",
    "ProfileShare",
    "Rollout",
    "ScoringProfile",
    "ScoringProfileSpec",
    "TopologyRequirement",
    "Weights",
    "WorkloadRuntime",
    "WorkloadRuntimeSpec",
]
