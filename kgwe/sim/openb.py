"""Read the Alibaba cluster-trace-gpu-v2023 ("openb") node and pod lists and the FGD published results."""

from __future__ import annotations

import csv
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.extender.core import WorkloadType
from kgwe.extender.nodes import NodeState
from kgwe.extender.request import PodRequest
from kgwe.gpu.catalog import GPUModel
from kgwe.resources import shared_data_dir


def openb_dir() -> Path:
    return shared_data_dir() / "alibaba-gpu-v2023"


def fgd_results_dir() -> Path:
    return shared_data_dir() / "fgd-atc23-expected-results"


# The 17 workloads of the FGD experiments (experiments/README: 6 policies x 17 traces x 10 seeds).
WORKLOADS = (
    "default",
    "cpu050",
    "cpu100",
    "cpu200",
    "cpu250",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpushare100",
    "gpuspec10",
    "gpuspec20",
    "gpuspec25",
    "gpuspec33",
    "multigpu20",
    "multigpu30",
    "multigpu40",
    "multigpu50",
)
POLICIES = ("Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD")


@dataclass(frozen=True)
class TracePod:
    """A pod of the trace reduced to what placement needs; `req` is shared by pods of equal shape."""

    req: PodRequest

    @property
    def gpu_milli_total(self) -> int:
        return self.req.gpu_milli_total


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise KgweError(f"trace file not found: {path} (set KGWE_DATA, or --data / --results)")
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def load_nodes(data_dir: Path | None = None) -> list[NodeState]:
    """All 1,523 openb nodes (CPU-only ones included: CPU pods land there). Model codes double as products."""
    nodes = []
    for r in _rows((data_dir or openb_dir()) / "openb_node_list_all_node.csv"):
        gpus = int(r["gpu"] or 0)
        model = r["model"] if gpus else ""
        nodes.append(
            NodeState(
                name=r["sn"],
                gpus=gpus,
                model=model,
                product=model,
                cpu_milli=int(r["cpu_milli"]),
                memory_mib=int(r["memory_mib"]),
            )
        )
    return nodes


_Shape = tuple[int, int, int, int, tuple[str, ...]]  # GPUs, GPU milli, CPU milli, memory MiB, GPU types


def load_pods(workload: str, data_dir: Path | None = None) -> list[TracePod]:
    rows = _rows((data_dir or openb_dir()) / f"openb_pod_list_{workload}.csv")
    shapes: dict[_Shape, PodRequest] = {}
    pods = []
    for r in rows:
        gpus = int(r["num_gpu"] or 0)
        milli = int(r["gpu_milli"] or 0)
        spec = tuple(sorted(s.strip().lower() for s in (r.get("gpu_spec") or "").split("|") if s.strip()))
        key = (gpus, milli, int(r["cpu_milli"]), int(r["memory_mib"]), spec)
        req = shapes.get(key)
        if req is None:
            req = PodRequest(
                gpus=gpus,
                gpu_milli=milli if gpus == 1 and 0 < milli < 1000 else 1000,
                cpu_milli=key[2],
                memory_mib=key[3],
                products=spec,
            )
            shapes[key] = req
        pods.append(TracePod(req))
    return pods


@dataclass(frozen=True)
class FractionalPod:
    """A pod of the trace asking for part of one GPU: what MIG could serve it with, and when."""

    creation: int  # seconds from the trace's start
    deletion: int
    gpu_milli: int


def fractional_pods(workload: str = "default", data_dir: Path | None = None) -> list[FractionalPod]:
    """The pods with num_gpu 1 and 0 < gpu_milli < 1000, in file order."""
    out = []
    for r in _rows((data_dir or openb_dir()) / f"openb_pod_list_{workload}.csv"):
        milli = int(r["gpu_milli"] or 0)
        if int(r["num_gpu"] or 0) == 1 and 0 < milli < 1000:
            out.append(FractionalPod(int(r["creation_time"]), int(r["deletion_time"]), milli))
    return out


def mig_profile(gpu_milli: int, model: GPUModel) -> str:
    """The smallest plain profile of `model` covering gpu_milli/1000 of both its compute and its memory
    slices: the trace has no GPU-memory field, and a pod given a share of a GPU gets that share of both."""
    share = gpu_milli / 1000
    need_c = math.ceil(share * model.compute_slots - 1e-9)
    need_m = math.ceil(share * model.memory_slots - 1e-9)
    fitting = [p for p in model.base_profiles if p.compute_slices >= need_c and p.memory_slices >= need_m]
    return min(fitting, key=lambda p: (p.compute_slices, p.memory_slices)).name


def workload_mix(pods: list[TracePod], coverage: float = 0.995) -> list[WorkloadType]:
    """FGD's target workload: the request shapes of the trace's GPU pods and their frequencies, the most
    frequent first until `coverage` of the pods. A shape is what the extender learns from the pods it sees
    (GPUs, share, CPU, memory, GPU-type pins); FGD's typical pods too are told apart by their CPU, so a
    shape needing more CPU than most nodes have per GPU is not averaged away."""
    counts: Counter[_Shape] = Counter()
    for p in pods:
        r = p.req
        if r.gpus:
            counts[(r.gpus, r.gpu_milli, r.cpu_milli, r.memory_mib, r.products)] += 1
    total = sum(counts.values()) or 1
    out, seen = [], 0
    for (gpus, milli, cpu, mem, products), n in counts.most_common():
        if seen / total >= coverage:
            break
        seen += n
        out.append(WorkloadType(gpus, milli, cpu, mem, n / total, products))
    return out


def published(results_dir: Path | None = None) -> dict[tuple[str, str], tuple[float, float]]:
    """(workload, policy) -> mean GPU allocation % at arrived 100% and 130% over the published seeds."""
    acc: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in _rows((results_dir or fgd_results_dir()) / "analysis_allo_discrete.csv"):
        workload = r["workload"].removeprefix("openb_pod_list_")
        policy = r["sc_policy"].split("-", 1)[-1]
        acc[(workload, policy)].append((float(r["100"]), float(r["130"])))
    return {k: (sum(a for a, _ in v) / len(v), sum(b for _, b in v) / len(v)) for k, v in acc.items()}
