"""Commented GPUWorkload manifests, one per workload type, that validate as they are (`kgwe template`).
Pure: the text is built from a few per-type choices; every field a user is likely to change is explained
beside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from kgwe.policy.gpu_workload import WorkloadType
from kgwe.vocab import STRATEGIES, TOPOLOGY_PREFERENCES

TYPES: tuple[str, ...] = get_args(WorkloadType)


@dataclass(frozen=True)
class _Shape:
    what: str  # one line: what this type is for
    gpus: str  # the gpuRequirements block (indented under spec)
    extra: str  # further spec fields
    framework: str
    image: str
    command: str


_SHAPES: dict[str, _Shape] = {
    "Training": _Shape(
        "one training pod on NVLink-connected GPUs of one node",
        "  gpuRequirements:\n"
        "    count: 8                    # whole GPUs for the pod (1-64), all on one node\n"
        "    topology:\n"
        "      preference: NVLinkOptimal # {prefs}\n",
        "",
        "PyTorch",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        '["python", "train.py"]',
    ),
    "DistributedTraining": _Shape(
        "several pods admitted all-or-nothing (gang), each on NVLink-connected GPUs",
        "  gpuRequirements:\n"
        "    count: 8                    # GPUs per pod\n"
        "    topology:\n"
        "      preference: NVLinkOptimal # {prefs}\n",
        "  distributedConfig:\n"
        "    nodes: 2                    # pods (one per node); worldSize = nodes x processesPerNode\n"
        "    processesPerNode: 8\n"
        "    backend: nccl\n"
        "  gang:\n"
        "    timeoutSeconds: 600         # not all pods scheduled by then: condition GangTimeout\n",
        "PyTorch",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        '["torchrun", "train.py"]',
    ),
    "Batch": _Shape(
        "a run-to-completion job on one GPU",
        "  gpuRequirements:\n    count: 1\n",
        "",
        "PyTorch",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        '["python", "batch.py"]',
    ),
    "HPC": _Shape(
        "an MPI job: a launcher and GPU workers, started together",
        "  gpuRequirements:\n    count: 4                    # GPUs per worker pod\n",
        "  roles:\n    - name: launcher\n      replicas: 1\n    - name: worker\n      replicas: 2\n",
        "MPI",
        "nvcr.io/nvidia/hpc-benchmarks:24.03",
        '["mpirun", "./solver"]',
    ),
    "Inference": _Shape(
        "a long-running server on MIG instances (a Deployment, not a Job)",
        "  gpuRequirements:\n"
        "    count: 1\n"
        "    migProfile: 1g.10gb         # one MIG instance per pod; remove for whole GPUs\n",
        "  roles:\n    - name: server\n      replicas: 2               # pods serving behind one Service\n",
        "Triton",
        "nvcr.io/nvidia/tritonserver:24.05-py3",
        '["tritonserver", "--model-repository=/models"]',
    ),
    "Interactive": _Shape(
        "a notebook on a share of one GPU (time-sliced)",
        "  gpuRequirements:\n"
        "    gpuMilli: 500                # thousandths of one GPU (1-1000); count must be 1\n",
        "",
        "JupyterLab",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        '["jupyter", "lab", "--ip=0.0.0.0"]',
    ),
}


def template(
    workload_type: str = "Training", *, name: str | None = None, namespace: str | None = None
) -> str:
    """The commented manifest for `workload_type` (one of TYPES)."""
    shape = _SHAPES[workload_type]
    name = name or f"my-{workload_type.lower()}"
    ns = (
        f"  namespace: {namespace}\n"
        if namespace
        else "  # namespace: ml-team           # default: kgwe submit -n, else the context's\n"
    )
    prefs = " | ".join(TOPOLOGY_PREFERENCES)
    return (
        f"# A {workload_type} GPUWorkload: {shape.what}.\n"
        "# Check it with `kgwe validate FILE`, submit it with `kgwe submit FILE` (--dry-run=server first).\n"
        "apiVersion: kgwe.nvidia.io/v1\n"
        "kind: GPUWorkload\n"
        "metadata:\n"
        f"  name: {name}\n"
        f"{ns}"
        "spec:\n"
        f"  workloadType: {workload_type}\n"
        f"{shape.gpus.format(prefs=prefs)}"
        f"{shape.extra}"
        f"  framework: {shape.framework}\n"
        "  # team: ml-research            # who is charged (default: the namespace)\n"
        "  # priority: 100                # an integer or a PriorityClass name\n"
        f"  # schedulingStrategy: BestFit  # {' | '.join(STRATEGIES)}\n"
        "  retryPolicy:\n"
        "    maxRetries: 3                # whole-workload restarts after a pod fails\n"
        "  podTemplate:                   # a core/v1 PodTemplateSpec; KGWE adds the GPU requests\n"
        "    spec:\n"
        "      containers:\n"
        f"        - name: {shape.framework.lower()}\n"
        f"          image: {shape.image}\n"
        f"          command: {shape.command}\n"
    )
