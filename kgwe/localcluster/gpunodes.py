"""Simulated GPU nodes (kwok) that look like real GPU Operator nodes to anything reading the API.

A node carries what GPU Feature Discovery and the device plugin would publish on real hardware — GFD labels
(`nvidia.com/gpu.product`, `gpu.count`, `gpu.memory`, `mig.capable`, `mig.strategy`, ...), allocatable
`nvidia.com/gpu` or `nvidia.com/mig-<profile>` (mixed strategy) — plus KGWE's own topology annotation as the
KGWE agent would write it from NVML. So code and tests written against these nodes read the same fields they
would read on a cluster running the GPU Operator.

`node_manifest` is pure (a dict); the create/wait/delete helpers do the API calls.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.errors import KgweError
from kgwe.gpu import catalog
from kgwe.policy.inventory import InventoryNode
from kgwe.runtime import conditions
from kgwe.runtime.errors import is_conflict, is_not_found
from kgwe.topology import annotation as topology_annotation
from kgwe.topology import known as known_topologies
from kgwe.topology.fake_nvml import CUDA_DRIVER_VERSION, DRIVER_VERSION
from kgwe.vocab import (
    GPU_COUNT_LABEL,
    GPU_DEPLOY_LABEL_PREFIX,
    GPU_FAMILY_LABEL,
    GPU_MEMORY_LABEL,
    GPU_OPERATOR_NAMESPACE,
    GPU_PRESENT_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_REPLICAS_LABEL,
    GPU_RESOURCE,
    GPU_SHARING_STRATEGY_LABEL,
    MIG_ALL_DISABLED,
    MIG_CONFIG_LABEL,
    MIG_MANAGER_DEPLOY_LABEL,
    MIG_STATE_LABEL,
    MIG_STRATEGY_LABEL,
    NVIDIA_RESOURCE_PREFIX,
    mig_resource,
)

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# Every kwok node carries this label: the GPU Operator's stand-ins act on these nodes only (the real node's
# GPU stack, when it has one, is NVIDIA's own: nvidiastack.py).
KWOK_NODE_LABEL = ("type", "kwok")
KWOK_NODE_SELECTOR = "=".join(KWOK_NODE_LABEL)
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
MACHINE_LABEL = "node.kubernetes.io/instance-type"
# GPU Operator operand labels on every GPU node; the MIG manager pauses these during a change.
OPERAND_DEPLOY_LABELS = tuple(
    GPU_DEPLOY_LABEL_PREFIX + o
    for o in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
)

# Per-GPU MIG layout, as in kgwe.planner.migparted: None = MIG disabled, else the profile names on that GPU.
MigLayout = Sequence[Sequence[str] | None]
# The taint GPU node pools commonly carry (GKE sets it on every GPU node): ordinary pods stay off the GPU
# nodes, pods asking for nvidia.com/gpu tolerate it automatically (the ExtendedResourceToleration admission
# plugin), GPU DaemonSets tolerate it (the GPU Operator's and KGWE's agent do).
GPU_NODE_TAINT: Mapping[str, str] = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}


def gfd_software_labels(
    gpu_machine: GpuMachine, driver: str = DRIVER_VERSION, cuda: str = CUDA_DRIVER_VERSION
) -> dict[str, str]:
    """The labels GFD writes besides the GPU's model (checked against GFD v0.20.0 on NVIDIA's mock:
    tests/localcluster/test_gfd_label_drift.py): sharing (none yet), MPS, vGPU, the GPU mode (a data-centre
    GPU is a PCI 3D controller: `compute`), the machine, and the driver's and CUDA's versions."""
    major, minor, revision = [*driver.split("."), "", "", ""][:3]
    cuda_major, cuda_minor = [*cuda.split("."), ""][:2]
    return {
        GPU_REPLICAS_LABEL: "1",
        GPU_SHARING_STRATEGY_LABEL: "none",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/vgpu.present": "false",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.machine": gpu_machine.key,
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": revision,
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": revision,
        "nvidia.com/cuda.runtime-version.full": cuda,
        "nvidia.com/cuda.runtime-version.major": cuda_major,
        "nvidia.com/cuda.runtime-version.minor": cuda_minor,
        "nvidia.com/cuda.runtime.major": cuda_major,
        "nvidia.com/cuda.runtime.minor": cuda_minor,
    }


@dataclass(frozen=True)
class GpuMachine:
    """A real GPU server model: what GFD would report and which replayed topology it has."""

    key: str
    product: str  # GFD nvidia.com/gpu.product
    gpu_count: int
    topology: str  # kgwe.topology.known name
    cpu: str
    memory: str
    family: str
    compute_capability: tuple[int, int]

    @property
    def gpu_model(self) -> catalog.GPUModel:
        model = catalog.model_for_product(self.product)
        if model is None:
            raise KgweError(f"GPU product {self.product!r} is not in the catalog")
        return model


MACHINES: dict[str, GpuMachine] = {
    m.key: m
    for m in (
        GpuMachine("DGX-H100", "NVIDIA-H100-80GB-HBM3", 8, "HGX-H100", "224", "2063937Mi", "hopper", (9, 0)),
        GpuMachine("DGX-A100", "NVIDIA-A100-SXM4-80GB", 8, "DGX-A100", "256", "2113645Mi", "ampere", (8, 0)),
        GpuMachine("DGX-1-V100", "Tesla-V100-SXM2-32GB", 8, "DGX-1-V100", "80", "527988Mi", "volta", (7, 0)),
        GpuMachine(
            "A100-PCIE-NVLINK-PAIRS",
            "NVIDIA-A100-80GB-PCIe",
            8,
            "A100-PCIE-PAIRS-ADJACENT",
            "128",
            "1056773Mi",
            "ampere",
            (8, 0),
        ),
        GpuMachine(
            "L40S-8-PCIE", "NVIDIA-L40S", 8, "L40S-8-PCIE", "128", "1056773Mi", "ada-lovelace", (8, 9)
        ),
    )
}


# A GPUInventory node's `topology` -> the simulated machine that has it.
MACHINE_FOR_TOPOLOGY = {
    "DGX-H100": "DGX-H100",
    "HGX-H100": "DGX-H100",
    "DGX-A100": "DGX-A100",
    "L40S-8-PCIE": "L40S-8-PCIE",
    "DGX-1-V100": "DGX-1-V100",
    "A100-PCIE-PAIRS-ADJACENT": "A100-PCIE-NVLINK-PAIRS",
}


def machine(key: str) -> GpuMachine:
    try:
        return MACHINES[key]
    except KeyError:
        raise KgweError(f"unknown GPU machine {key!r}; known: {', '.join(MACHINES)}") from None


def inventory_machine(node: InventoryNode) -> GpuMachine:
    """The simulated machine for a GPUInventory node: by its topology, else the one machine of its product."""
    if node.topology in MACHINE_FOR_TOPOLOGY:
        return MACHINES[MACHINE_FOR_TOPOLOGY[node.topology]]
    same_product = [m for m in MACHINES.values() if m.product == node.product]
    if len(same_product) == 1:
        return same_product[0]
    raise KgweError(
        f"GPUInventory node {node.name}: no simulated GPU machine for topology {node.topology!r} / product "
        f"{node.product!r} (topologies: {', '.join(MACHINE_FOR_TOPOLOGY)}; products: "
        f"{', '.join(sorted({m.product for m in MACHINES.values()}))})"
    )


def inventory_node_manifest(
    node: InventoryNode, *, with_mig_layout: bool = True, taints: Sequence[Mapping[str, str]] = ()
) -> dict[str, Any]:
    """A kwok Node for a GPUInventory node: its machine's GFD labels, its own non-GPU labels (pool, zone),
    and, `with_mig_layout`, the MIG layout and `nvidia.com/mig.config` its devices record (else MIG off)."""
    m = inventory_machine(node)
    labels = {k: v for k, v in node.labels.items() if not k.startswith(NVIDIA_RESOURCE_PREFIX)}
    devices = sorted(node.devices, key=lambda d: d.index)
    options: dict[str, Any] = {}
    if (
        with_mig_layout
        and m.gpu_model.mig_capable
        and len(devices) == m.gpu_count
        and any(d.mig for d in devices)
    ):
        options["mig_layout"] = [d.mig for d in devices]
        options["mig_config"] = node.mig_config
    return node_manifest(node.name, m, labels=labels, taints=taints, **options)


def mig_resource_name(profile: str) -> str:
    """Device-plugin (mixed strategy) resource name: `1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`."""
    return mig_resource(profile)


def gpu_resources(gpu_count: int, layout: MigLayout | None, strategy: str = "mixed") -> dict[str, int]:
    """Extended resources the NVIDIA device plugin would advertise for a per-GPU MIG layout."""
    if layout is None:
        return {GPU_RESOURCE: gpu_count}
    if len(layout) != gpu_count:
        raise KgweError(f"MIG layout lists {len(layout)} GPUs but the node has {gpu_count}")
    whole = sum(1 for gpu in layout if gpu is None)
    instances = Counter(p for gpu in layout if gpu is not None for p in gpu)
    if strategy == "single":
        return {GPU_RESOURCE: whole + sum(instances.values())}
    resources = {GPU_RESOURCE: whole}
    resources.update({mig_resource_name(p): n for p, n in sorted(instances.items())})
    return resources


@functools.lru_cache(maxsize=32)
def topology_annotation_value(topology: str) -> str:
    """KGWE's topology annotation as `kgwe agent` writes it (kgwe.topology.annotation's encoder)."""
    return topology_annotation.encode(known_topologies.load(topology))


class ManifestOptions(TypedDict, total=False):
    """node_manifest's options, as the create_* helpers pass them on (mypy checks the two agree)."""

    mig_layout: MigLayout | None
    mig_config: str | None
    mig_strategy: str
    labels: Mapping[str, str] | None
    taints: Sequence[Mapping[str, str]]


def node_manifest(
    name: str,
    gpu_machine: GpuMachine,
    *,
    mig_layout: MigLayout | None = None,
    mig_config: str | None = None,
    mig_strategy: str = "mixed",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A kwok Node manifest for `gpu_machine`; `mig_layout` sets MIG instances already applied.

    MIG-capable nodes get `nvidia.com/mig.config` (default `all-disabled`, as the GPU Operator sets it) with
    state `success`, and `nvidia.com/gpu.deploy.mig-manager=true` so a MIG manager manages them.
    """
    model = gpu_machine.gpu_model
    if mig_layout is not None and not model.mig_capable:
        raise KgweError(f"{gpu_machine.key} ({model.key}) is not MIG capable")
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        KWOK_NODE_LABEL[0]: KWOK_NODE_LABEL[1],
        MACHINE_LABEL: gpu_machine.key,
        GPU_PRESENT_LABEL: "true",
        GPU_PRODUCT_LABEL: gpu_machine.product,
        GPU_COUNT_LABEL: str(gpu_machine.gpu_count),
        GPU_MEMORY_LABEL: str(model.memory_mib),
        GPU_FAMILY_LABEL: gpu_machine.family,
        "nvidia.com/gpu.compute.major": str(gpu_machine.compute_capability[0]),
        "nvidia.com/gpu.compute.minor": str(gpu_machine.compute_capability[1]),
        "nvidia.com/mig.capable": "true" if model.mig_capable else "false",
        **gfd_software_labels(gpu_machine),
        **{label: "true" for label in OPERAND_DEPLOY_LABELS if not label.endswith(".nvsm")},
        # GFD writes the device-plugin config's MIG strategy on every GPU node, MIG-capable or not
        MIG_STRATEGY_LABEL: mig_strategy,
    }
    if model.mig_capable:
        node_labels.update(
            {
                MIG_CONFIG_LABEL: mig_config or (MIG_ALL_DISABLED if mig_layout is None else "custom"),
                MIG_STATE_LABEL: "success",
                MIG_MANAGER_DEPLOY_LABEL: "true",
            }
        )
    node_labels.update(labels or {})
    resources = {
        "cpu": gpu_machine.cpu,
        "memory": gpu_machine.memory,
        "pods": "110",
        "ephemeral-storage": "3Ti",
        **{k: str(v) for k, v in gpu_resources(gpu_machine.gpu_count, mig_layout, mig_strategy).items()},
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {
                KWOK_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                topology_annotation.ANNOTATION_KEY: topology_annotation_value(gpu_machine.topology),
            },
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


# --------------------------------------------------------------------------------------------------
# API helpers


def create_gpu_node(
    api_client: client.ApiClient,
    name: str,
    gpu_machine: GpuMachine | str,
    **manifest_options: Unpack[ManifestOptions],
) -> client.V1Node:
    """Create one simulated GPU node; returns the created V1Node."""
    m = machine(gpu_machine) if isinstance(gpu_machine, str) else gpu_machine
    return client.CoreV1Api(api_client).create_node(node_manifest(name, m, **manifest_options))


def create_gpu_nodes(
    api_client: client.ApiClient,
    gpu_machine: GpuMachine | str,
    names: Iterable[str],
    workers: int = 8,
    **manifest_options: Unpack[ManifestOptions],
) -> list[str]:
    """Create many nodes concurrently (the apiserver, not this loop, should be the bottleneck).

    Responses are not turned into client models: at 1,000 nodes that parsing costs more CPU than the
    apiserver spends creating them.
    """
    m = machine(gpu_machine) if isinstance(gpu_machine, str) else gpu_machine
    core = client.CoreV1Api(api_client)
    names = list(names)

    def create(name: str) -> None:
        resp = core.create_node(node_manifest(name, m, **manifest_options), _preload_content=False)
        resp.read()  # drain before handing the connection back to the pool
        resp.release_conn()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(create, names))
    return names


def _raw_ready(node: Mapping[str, Any]) -> bool:
    ready = conditions.is_true(conditions.of(node), "Ready")
    tainted = any(t.get("key") == NOT_READY_TAINT for t in node.get("spec", {}).get("taints") or [])
    return ready and not tainted


def is_schedulable_ready(node: client.V1Node) -> bool:
    """Ready condition True and no not-ready taint left (the scheduler can place pods on it)."""
    ready = conditions.is_true((node.status and node.status.conditions) or [], "Ready")
    tainted = any(t.key == NOT_READY_TAINT for t in (node.spec.taints or []))
    return ready and not tainted


def wait_nodes_ready(
    api_client: client.ApiClient,
    names: Iterable[str],
    timeout_seconds: float = 60.0,
    label_selector: str | None = None,
    poll_seconds: float = 0.25,
) -> float:
    """Block until every named node is Ready and untainted; returns the seconds waited.

    Polls a raw (JSON, not model) node list: cheap even for thousands of nodes.
    """
    core = client.CoreV1Api(api_client)
    pending = set(names)
    t0 = time.monotonic()
    while True:
        resp = core.list_node(label_selector=label_selector, _preload_content=False)
        items = json.loads(resp.read())["items"]
        resp.release_conn()
        pending -= {n["metadata"]["name"] for n in items if _raw_ready(n)}
        if not pending:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_seconds:
            sample = ", ".join(sorted(pending)[:5])
            raise KgweError(f"{len(pending)} node(s) not Ready after {timeout_seconds:.0f}s (e.g. {sample})")
        time.sleep(poll_seconds)


def delete_nodes(api_client: client.ApiClient, names: Iterable[str], workers: int = 8) -> None:
    """Delete nodes, ignoring ones already gone."""
    core = client.CoreV1Api(api_client)
    lock = threading.Lock()
    errors: list[str] = []

    def delete(name: str) -> None:
        try:
            core.delete_node(name)
        except ApiException as exc:
            if not is_not_found(exc):
                with lock:
                    errors.append(f"{name}: {exc.reason}")

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(delete, list(names)))
    if errors:
        raise KgweError("could not delete nodes: " + "; ".join(errors[:5]))


# What the NVIDIA GPU Operator puts on a cluster besides its node-side managers: its namespace, and the
# RuntimeClass of its container toolkit (GPU pods such as KGWE's agent name it; without it the API server
# refuses them).
NVIDIA_RUNTIME_CLASS = "nvidia"


def ensure_gpu_operator_objects(
    api_client: client.ApiClient, namespace: str = GPU_OPERATOR_NAMESPACE
) -> None:
    """The GPU Operator's namespace and RuntimeClass `nvidia`, as on a cluster that runs it (idempotent)."""
    from kgwe.cluster.client import ensure_namespace

    ensure_namespace(api_client, namespace)
    try:
        client.NodeV1Api(api_client).create_runtime_class(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": NVIDIA_RUNTIME_CLASS},
                "handler": NVIDIA_RUNTIME_CLASS,
            }
        )
    except ApiException as exc:
        if not is_conflict(exc):  # already there
            raise
