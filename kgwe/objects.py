"""The fields KGWE reads of the Kubernetes objects it watches as plain JSON (TypedDicts, all optional).

The API server has validated these objects against its schema, so a field present has the type named here;
a field may still be absent, which is why every key is optional and readers keep their `.get(...) or {}`.
Watches decode an object once and name its type here (`cast(Pod, raw)`): the seam where JSON becomes typed.
Only the fields some reader uses are listed; the rest of an object stays reachable as it came.
"""

from __future__ import annotations

from typing import Any, TypedDict


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[dict[str, Any]]


class Condition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class NodeStatus(TypedDict, total=False):
    capacity: dict[str, str]
    allocatable: dict[str, str]
    conditions: list[Condition]


class Node(TypedDict, total=False):
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: NodeStatus


class ResourceRequirements(TypedDict, total=False):
    limits: dict[str, str]
    requests: dict[str, str]


class Container(TypedDict, total=False):
    name: str
    image: str
    resources: ResourceRequirements


class PodSpec(TypedDict, total=False):
    nodeName: str
    schedulerName: str
    priority: int
    containers: list[Container]
    initContainers: list[Container]
    overhead: dict[str, str]


class PodStatus(TypedDict, total=False):
    phase: str
    conditions: list[Condition]
    startTime: str


class Pod(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class ConfigMap(TypedDict, total=False):
    metadata: ObjectMeta
    data: dict[str, str]
