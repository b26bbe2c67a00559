"""Read the cluster's GPU nodes into plain data: A's GPUInventory shape (for planning, `kgwe plan` and the
snapshot committed under reports/) and the facts the rollout decision needs.

Sources, all as published on a cluster running the GPU Operator plus the KGWE agent:
- GPU nodes: label `nvidia.com/gpu.present=true`; GFD labels `nvidia.com/gpu.product`, `gpu.count`;
- `kgwe.nvidia.io/topology`: the agent's annotation (only its `name` is kept here);
- `nvidia.com/mig.config` / `nvidia.com/mig.config.state`: the MIG manager's protocol;
- the current per-GPU MIG layout: the mig-parted config named by the node's label (KGWE keeps every config a
  label names in its ConfigMap); while the MIG manager applies it, that is where the node is going;
- pods holding GPUs: non-terminal pods bound to the node with nvidia.com/gpu or nvidia.com/mig-* requests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client

from kgwe.cluster.client import list_items
from kgwe.cluster.nodes import attempt_stamp, gpu_pods_by_node, live_pods, pod_gpu_requests
from kgwe.errors import KgweError
from kgwe.timestamps import parse_rfc3339 as parse_time
from kgwe.topology import health
from kgwe.topology.annotation import topology_name
from kgwe.vocab import (
    ACKNOWLEDGED_ANNOTATION,
    API_VERSION,
    CORDONED_ANNOTATION,
    GPU_COUNT_LABEL,
    GPU_NODE_SELECTOR,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    MIG_CONFIG_LABEL,
    MIG_DEVICES_KEY,
    MIG_ENABLED_KEY,
    MIG_RESOURCE_PREFIX,
    MIG_STATE_LABEL,
    REQUESTED_AT_ANNOTATION,
    RETRY_ANNOTATION,
    ROLLOUT_REVISION_ANNOTATION,
    TOPOLOGY_ANNOTATION,
)

_STATES = ("pending", "rebooting", "success", "failed")


@dataclass
class GpuNodeFacts:
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    gpus: int
    product: str
    topology: str | None
    unschedulable: bool
    gpu_pods: list[str] = field(default_factory=list)  # namespace/name
    whole_gpus_in_use: int = 0
    mig_in_use: Counter[str] = field(default_factory=Counter)  # profile -> instances held
    mig_by_pod: dict[str, dict[str, int]] = field(default_factory=dict)  # namespace/name -> profile -> held
    pod_started: dict[str, str] = field(default_factory=dict)  # namespace/name -> status.startTime (MIG pods)

    @property
    def unhealthy_gpus(self) -> frozenset[int]:
        """GPU indices the agent's gpu-health annotation lists (none when it is absent or malformed)."""
        try:
            return frozenset(health.decode(self.annotations.get(health.ANNOTATION_KEY)))
        except KgweError:
            return frozenset()

    @property
    def mig_config(self) -> str | None:
        return self.labels.get(MIG_CONFIG_LABEL)

    @property
    def mig_state(self) -> str | None:
        return self.labels.get(MIG_STATE_LABEL)

    @property
    def cordoned_by_kgwe(self) -> bool:
        return CORDONED_ANNOTATION in self.annotations

    @property
    def requested_at(self) -> datetime | None:
        return parse_time(self.annotations.get(REQUESTED_AT_ANNOTATION))

    @property
    def rollout_revision(self) -> str | None:
        return self.annotations.get(ROLLOUT_REVISION_ANNOTATION)

    @property
    def retry_requested(self) -> bool:
        return RETRY_ANNOTATION in self.annotations

    @property
    def failure_acknowledged(self) -> bool:
        return self.annotations.get(ACKNOWLEDGED_ANNOTATION) == attempt_stamp(self.annotations)


def _topology_name(annotations: Mapping[str, str]) -> str | None:
    return topology_name(annotations.get(TOPOLOGY_ANNOTATION))


def facts_from_objects(
    nodes: Sequence[Mapping[str, Any]], gpu_pods: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[GpuNodeFacts]:
    """Pure: Node/Pod dicts (as the API returns them) → facts (separate from the reads for benchmarks)."""
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        annotations = dict(meta.get("annotations") or {})
        try:
            gpus = int(labels.get(GPU_COUNT_LABEL, "0"))
        except ValueError:
            gpus = 0
        facts = GpuNodeFacts(
            name=meta["name"],
            labels=labels,
            annotations=annotations,
            gpus=gpus,
            product=labels.get(GPU_PRODUCT_LABEL, ""),
            topology=_topology_name(annotations),
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        )
        for pod in gpu_pods.get(meta["name"], []):
            pod_meta = pod.get("metadata") or {}
            key = f"{pod_meta.get('namespace')}/{pod_meta.get('name')}"
            facts.gpu_pods.append(key)
            for resource, count in pod_gpu_requests(pod).items():
                if resource == GPU_RESOURCE:
                    facts.whole_gpus_in_use += count
                elif resource.startswith(MIG_RESOURCE_PREFIX):
                    profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
                    facts.mig_in_use[profile] += count
                    facts.mig_by_pod.setdefault(key, {})[profile] = count
                    started = (pod.get("status") or {}).get("startTime")
                    if started:
                        facts.pod_started[key] = str(started)
        out.append(facts)
    return sorted(out, key=lambda f: f.name)


def read_gpu_nodes(api_client: client.ApiClient) -> list[GpuNodeFacts]:
    return read_gpu_nodes_and_unscheduled(api_client)[0]


def read_gpu_nodes_and_unscheduled(
    api_client: client.ApiClient,
) -> tuple[list[GpuNodeFacts], list[dict[str, Any]]]:
    """The GPU nodes' facts, and the live pods no node holds yet (from the same pod list: MIG rebalancing
    reads pending demand from them at no extra API call)."""
    core = client.CoreV1Api(api_client)
    nodes = list_items(core.list_node, label_selector=GPU_NODE_SELECTOR)
    pods = live_pods(core)
    unscheduled = [p for p in pods if not (p.get("spec") or {}).get("nodeName")]
    return facts_from_objects(nodes, gpu_pods_by_node(core, pods)), unscheduled


def config_layout(
    entries: Sequence[Mapping[str, Any]] | None, gpus: int
) -> list[tuple[str, ...] | None] | None:
    """Per-GPU layout a mig-parted config selects on a node with `gpus` GPUs (profiles sorted; None = MIG
    disabled); None when the config is unknown. Two config names with equal layouts are the same change."""
    if entries is None:
        return None
    layout: list[tuple[str, ...] | None] = [None] * gpus
    for entry in entries:
        devices = entry.get("devices")
        indices = range(gpus) if devices == "all" else [i for i in devices or [] if 0 <= i < gpus]
        devices_wanted = (entry.get(MIG_DEVICES_KEY) or {}).items()
        profiles = (
            tuple(sorted(p for p, n in devices_wanted for _ in range(int(n))))
            if entry.get(MIG_ENABLED_KEY)
            else None
        )
        for i in indices:
            layout[i] = profiles
    return layout


def _current_layouts(facts: GpuNodeFacts, mig_configs: Mapping[str, Any]) -> list[list[str] | None] | None:
    """Per-GPU layout of the config the node's label names, whatever the MIG manager's state: once KGWE has
    selected a config the node is there or on its way (the rollout never changes a target mid-apply), so
    plans made while nodes are mid-change see the pool as it will be. None when the config is not known."""
    layout = config_layout(mig_configs.get(facts.mig_config or ""), facts.gpus)
    if layout is None:
        return None
    return [list(gpu) if gpu is not None else None for gpu in layout]


def inventory_document(
    facts: Sequence[GpuNodeFacts],
    *,
    name: str = "cluster",
    cluster: str | None = None,
    mig_configs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A GPUInventory object (as YAML/JSON data) describing `facts`; validated by kgwe.policy."""
    nodes = []
    for f in facts:
        if f.gpus < 1:
            continue
        # Unknown configs (e.g. the GPU Operator's own names) are left to the label: the planner decodes those
        layouts = _current_layouts(f, mig_configs or {}) or [None] * f.gpus
        in_use = Counter(f.mig_in_use)
        whole_busy = f.whole_gpus_in_use
        sick = f.unhealthy_gpus
        devices = []
        for index, layout in enumerate(layouts):
            device: dict[str, Any] = {"index": index}
            if index in sick:
                device["unhealthy"] = True
            if layout is None:
                if whole_busy > 0:
                    device["busy"] = True
                    whole_busy -= 1
            else:
                device["mig"] = list(layout)
                held = []
                for profile in layout:  # assign held instances to GPUs in index order
                    if in_use[profile] > 0:
                        in_use[profile] -= 1
                        held.append(profile)
                if held:
                    device["inUse"] = held
            if len(device) > 1:
                devices.append(device)
        node: dict[str, Any] = {
            "name": f.name,
            "labels": dict(sorted(f.labels.items())),
            "gpus": f.gpus,
            "product": f.product,
        }
        if f.topology:
            node["topology"] = f.topology
        if f.mig_config:
            node["migConfig"] = f.mig_config
        if f.mig_state in _STATES:
            node["migConfigState"] = f.mig_state
        if devices:
            node["devices"] = devices
        nodes.append(node)
    spec: dict[str, Any] = {"nodes": nodes}
    if cluster:
        spec["cluster"] = cluster
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUInventory",
        "metadata": {"name": name},
        "spec": spec,
    }
