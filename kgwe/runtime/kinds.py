"""The kinds KGWE reads and writes, and how one object is named (a Ref). A Kind is its apiVersion and kind,
as in every object; where it is served (its resource name, namespaced or not) is the cluster's business."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgwe.vocab import API_GROUP, CRD_VERSION, KUEUE_API_VERSION


@dataclass(frozen=True, order=True)
class Kind:
    api_version: str  # "v1", "apps/v1", "kgwe.nvidia.io/v1"
    kind: str

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Kind:
        return cls(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))

    def __str__(self) -> str:
        return f"{self.api_version} {self.kind}"


@dataclass(frozen=True, order=True)
class Ref:
    """One object: its kind, namespace (None: cluster-scoped) and name."""

    kind: Kind
    namespace: str | None
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Ref:
        meta = obj.get("metadata") or {}
        return cls(Kind.of(obj), meta.get("namespace") or None, str(meta.get("name") or ""))

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind.kind}/{where}{self.name}"


POLICY_REPOSITORY = Kind(f"{API_GROUP}/{CRD_VERSION}", "PolicyRepository")
GPU_WORKLOAD = Kind(f"{API_GROUP}/{CRD_VERSION}", "GPUWorkload")
NODE = Kind("v1", "Node")
POD = Kind("v1", "Pod")
NAMESPACE = Kind("v1", "Namespace")
CONFIG_MAP = Kind("v1", "ConfigMap")
SECRET = Kind("v1", "Secret")
EVENT = Kind("v1", "Event")
SERVICE = Kind("v1", "Service")
RESOURCE_QUOTA = Kind("v1", "ResourceQuota")
DEPLOYMENT = Kind("apps/v1", "Deployment")
JOB = Kind("batch/v1", "Job")
PRIORITY_CLASS = Kind("scheduling.k8s.io/v1", "PriorityClass")
POD_GROUP = Kind("scheduling.k8s.io/v1beta1", "PodGroup")
ROLE_BINDING = Kind("rbac.authorization.k8s.io/v1", "RoleBinding")
LOCAL_QUEUE = Kind(KUEUE_API_VERSION, "LocalQueue")
KUEUE_WORKLOAD = Kind(KUEUE_API_VERSION, "Workload")
