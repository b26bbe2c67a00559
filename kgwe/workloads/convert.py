"""Seed GPUWorkload manifests -> kgwe.nvidia.io/v1 (pure: dicts in, dict + a field-by-field account out).

Two seeds wrote their own GPUWorkload (what they meant: docs/facts/seeds.md):
- GPU_Orchestrator `gpu.warp.dev/v1alpha1`: spec.modelName, gpuCount, priority (a word), schedulingStrategy,
  retryPolicy.{maxRetries, backoffSeconds}; it had no pod template (its controller made the Job, with one
  container of its own, which the conversion keeps unless --image or --runtime says otherwise).
- AgentaFlow `agentaflow.io/v1`: spec.priority (integer), gpuMemoryRequired (MiB), schedulingStrategy,
  gpuRequirements.{minGPUMemory (MiB), gpuCount, exclusiveAccess}, podTemplate.
Every source field ends up either in `mapped` (source path, target path, value) or in `unmapped` (why); a
strategy word that means something else in KGWE than in its seed adds a warning saying how.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Any

from kgwe.errors import KgweError
from kgwe.vocab import (
    API_VERSION,
    MODEL_LABEL,
    SEED_WORKLOAD_API_VERSIONS,
    is_gpu_resource,
    strategy_for_word,
)

GPU_ORCHESTRATOR, AGENTAFLOW = SEED_WORKLOAD_API_VERSIONS
SOURCES = (GPU_ORCHESTRATOR, AGENTAFLOW)

_MIB_PER_GB = 1e9 / 2**20


class ConvertError(KgweError):
    """The input is not a seed manifest this converter knows."""


# GPU_Orchestrator's controller ran every workload in this one container (docs/facts/seeds.md).
GPU_ORCHESTRATOR_CONTAINER = "gpu-workload"
GPU_ORCHESTRATOR_IMAGE = "python:3.11-slim"
GPU_ORCHESTRATOR_DEFAULT_STRATEGY = "leastLoaded"  # what it placed with when spec.schedulingStrategy is empty

_KGWE_LEAST_LOADED = (
    "KGWE's LeastLoaded ranks nodes by the GPUs left free once the pod is placed, counted from the GPU "
    "requests of the pods on each node (allocation, not measured utilization)"
)
# Seed strategy words (normalised as vocab.strategy_for_word does) whose KGWE strategy of the same name
# places differently: how, per seed (docs/facts/seeds.md).
STRATEGY_CAVEATS: dict[str, dict[str, str]] = {
    GPU_ORCHESTRATOR: {
        "leastloaded": "GPU_Orchestrator's leastLoaded took the node with the most allocatable GPUs "
        f"(its size: what already ran there was not counted); {_KGWE_LEAST_LOADED}",
        "costoptimized": "GPU_Orchestrator's costOptimized preferred nodes labelled "
        "gpu-orchestrator/cheap-node=true; KGWE's CostOptimized reads no label: it ranks nodes by the "
        "on-demand price per GPU-hour of their product in the PricingCatalog",
    },
    AGENTAFLOW: {
        "leastutilized": "AgentaFlow's least_utilized took the GPU with the lowest measured utilization; "
        + _KGWE_LEAST_LOADED,
        "priority": "AgentaFlow's priority ordered the waiting workloads by spec.priority and placed each "
        "on the least utilized GPU; KGWE's Priority orders nodes, by their label "
        "kgwe.nvidia.io/node-priority (KGWE orders workloads by spec.priority, the PriorityClass, whatever "
        "the strategy): for "
        "AgentaFlow's placement use LeastLoaded",
        "bestfit": "AgentaFlow's best_fit took the GPU whose free memory was the smallest that held the "
        "workload; KGWE's BestFit takes the node left with the fewest free GPUs, MIG instances or GPU share "
        "(memory only filters, through minMemoryGB)",
        "roundrobin": "AgentaFlow's round_robin took the next free GPU in turn; KGWE's RoundRobin starts "
        "each request at the next node that fits",
    },
}


@dataclass
class Conversion:
    manifest: dict[str, Any]
    mapped: list[tuple[str, str, Any]] = field(default_factory=list)
    unmapped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (source path, what differs)

    def report_lines(self) -> list[str]:
        lines = [f"  {src} -> {dst}: {value!r}" for src, dst, value in self.mapped]
        lines += [f"  {src}: NOT MAPPED ({why})" for src, why in self.unmapped]
        lines += [f"  WARNING {src}: {why}" for src, why in self.warnings]
        return lines


def strategy_caveats(word: str) -> list[str]:
    """How each seed's strategy of this spelling differs from KGWE's strategy of the same name."""
    key = "".join(c for c in word if c not in "-_ \t").lower()
    return [by_word[key] for by_word in STRATEGY_CAVEATS.values() if key in by_word]


def strategy(word: str) -> str | None:
    """A seed's strategy word as a KGWE strategy, or None."""
    return strategy_for_word(word)


def mib_to_gb(mib: int | float) -> float:
    """MiB as decimal GB (what minMemoryGB means), rounded UP to 0.001 so no smaller GPU passes."""
    return math.ceil(mib / _MIB_PER_GB * 1000) / 1000


def convert(doc: dict[str, Any], image: str | None = None, runtime: str | None = None) -> Conversion:
    """`image`: the container for a source without a pod template; or `runtime`: the WorkloadRuntime whose
    template its pods get instead."""
    if not isinstance(doc, dict):
        raise ConvertError("a manifest must be a YAML mapping")
    api = doc.get("apiVersion")
    if doc.get("kind") != "GPUWorkload" or api not in SOURCES:
        raise ConvertError(
            f"not a seed GPUWorkload (apiVersion {api!r}, kind {doc.get('kind')!r}); "
            f"known: {', '.join(SOURCES)} kind GPUWorkload"
        )
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise ConvertError("spec must be a mapping")
    out = Conversion(manifest={"apiVersion": API_VERSION, "kind": "GPUWorkload"})
    _metadata(doc, out)
    new_spec: dict[str, Any] = {"gpuRequirements": {}}
    out.manifest["spec"] = new_spec
    if api == GPU_ORCHESTRATOR:
        _gpu_orchestrator(spec, new_spec, out, image, runtime)
    else:
        _agentaflow(spec, new_spec, out, image, runtime)
    if "status" in doc:
        out.unmapped.append(("status", "status is written by the KGWE controller"))
    return out


def _metadata(doc: dict[str, Any], out: Conversion) -> None:
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise ConvertError("metadata must be a mapping")
    kept = {k: copy.deepcopy(meta[k]) for k in ("name", "namespace", "labels", "annotations") if k in meta}
    for k in kept:
        out.mapped.append((f"metadata.{k}", f"metadata.{k}", kept[k]))
    for k in meta:
        if k not in kept:
            out.unmapped.append((f"metadata.{k}", "set by the API server"))
    out.manifest["metadata"] = kept


def _set_strategy(seed: str, src: str, value: object, spec: dict[str, Any], out: Conversion) -> None:
    mapped = strategy(str(value))
    if mapped is None:
        out.unmapped.append((src, f"no KGWE strategy matches {value!r}; the default ScoringProfile applies"))
        return
    spec["schedulingStrategy"] = mapped
    out.mapped.append((src, "spec.schedulingStrategy", mapped))
    caveat = STRATEGY_CAVEATS[seed].get("".join(c for c in str(value) if c not in "-_ \t").lower())
    if caveat:
        out.warnings.append((src, f"{value!r} became {mapped}, which places differently: {caveat}"))


def _template_for(
    name: str, image: str | None, runtime: str | None, src: str, new: dict[str, Any], out: Conversion
) -> bool:
    """spec.podTemplate (one container running `image`) or spec.runtime for a source without a template;
    False when neither was asked for."""
    if runtime:
        new["runtime"] = runtime
        out.unmapped.append((src, f"no pod template in the source: its pods get WorkloadRuntime {runtime!r}"))
        return True
    if not image:
        return False
    out.unmapped.append((src, f"no pod template in the source: one container {name!r} running {image!r}"))
    new["podTemplate"] = {"spec": {"containers": [{"name": name, "image": image}]}}
    return True


def _gpu_orchestrator(
    spec: dict[str, Any], new: dict[str, Any], out: Conversion, image: str | None, runtime: str | None
) -> None:
    model = spec.get("modelName")
    for key, value in spec.items():
        src = f"spec.{key}"
        if key == "modelName":
            label = re.sub(r"[^A-Za-z0-9._-]", "-", str(value))[:63].strip("-._") or "model"
            out.manifest["metadata"].setdefault("labels", {})[MODEL_LABEL] = label
            out.mapped.append((src, f"metadata.labels[{MODEL_LABEL}]", label))
        elif key == "gpuCount":
            new["gpuRequirements"]["count"] = value
            out.mapped.append((src, "spec.gpuRequirements.count", value))
        elif key == "priority":
            new["priority"] = str(value).lower()
            out.mapped.append(
                (src, "spec.priority (a PriorityClass of that name must exist)", new["priority"])
            )
        elif key == "schedulingStrategy":
            _set_strategy(GPU_ORCHESTRATOR, src, value, new, out)
        elif key == "retryPolicy" and isinstance(value, dict):
            retry: dict[str, Any] = {}
            for rk, rv in value.items():
                if rk in ("maxRetries", "backoffSeconds"):
                    retry[rk] = rv
                    out.mapped.append((f"{src}.{rk}", f"spec.retryPolicy.{rk}", rv))
                else:
                    out.unmapped.append((f"{src}.{rk}", "no KGWE retry setting of that name"))
            if retry:
                new["retryPolicy"] = retry
        else:
            out.unmapped.append((src, "no KGWE equivalent"))
    if "schedulingStrategy" not in spec:
        caveat = STRATEGY_CAVEATS[GPU_ORCHESTRATOR]["leastloaded"]
        out.warnings.append(
            (
                "spec.schedulingStrategy",
                f"absent: GPU_Orchestrator placed such a workload with {GPU_ORCHESTRATOR_DEFAULT_STRATEGY}, "
                f"KGWE with the default ScoringProfile ({caveat})",
            )
        )
    if not _template_for(_container_name(str(model or "main")), image, runtime, "spec.podTemplate", new, out):
        _seed_container(spec, new, out)


def _seed_container(spec: dict[str, Any], new: dict[str, Any], out: Conversion) -> None:
    """The container GPU_Orchestrator's own controller gave every workload (neither --image nor --runtime)."""
    env = [
        {"name": "MODEL_NAME", "value": str(spec.get("modelName") or "")},
        {"name": "GPU_COUNT", "value": str(spec.get("gpuCount") or "")},
    ]
    container = {"name": GPU_ORCHESTRATOR_CONTAINER, "image": GPU_ORCHESTRATOR_IMAGE, "env": env}
    new["podTemplate"] = {"spec": {"containers": [container]}}
    out.mapped.append(
        (
            "(GPU_Orchestrator's controller)",
            "spec.podTemplate",
            f"container {GPU_ORCHESTRATOR_CONTAINER} running {GPU_ORCHESTRATOR_IMAGE} with MODEL_NAME and "
            "GPU_COUNT, as GPU_Orchestrator ran it",
        )
    )
    out.warnings.append(
        (
            "spec.podTemplate",
            f"the source has none: GPU_Orchestrator ran every workload in {GPU_ORCHESTRATOR_IMAGE} (its own "
            "placeholder); pass --image IMAGE for your container, or --runtime NAME for a WorkloadRuntime's",
        )
    )


def _container_name(text: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", text.lower())[:63].strip("-") or "main"


def _agentaflow(
    spec: dict[str, Any], new: dict[str, Any], out: Conversion, image: str | None, runtime: str | None
) -> None:
    req = new["gpuRequirements"]
    memory_mib: dict[str, Any] = {}
    for key, value in spec.items():
        src = f"spec.{key}"
        if key == "priority":
            new["priority"] = value
            out.mapped.append((src, "spec.priority (highest PriorityClass at or below it)", value))
        elif key == "gpuMemoryRequired":
            memory_mib[src] = value
        elif key == "schedulingStrategy":
            _set_strategy(AGENTAFLOW, src, value, new, out)
        elif key == "gpuRequirements" and isinstance(value, dict):
            for rk, rv in value.items():
                rsrc = f"{src}.{rk}"
                if rk == "gpuCount":
                    req["count"] = rv
                    out.mapped.append((rsrc, "spec.gpuRequirements.count", rv))
                elif rk == "minGPUMemory":
                    memory_mib[rsrc] = rv
                elif rk == "exclusiveAccess":
                    new["exclusiveAccess"] = bool(rv)
                    out.mapped.append((rsrc, "spec.exclusiveAccess", bool(rv)))
                else:
                    out.unmapped.append((rsrc, "no KGWE equivalent"))
        elif key == "podTemplate" and isinstance(value, dict):
            new["podTemplate"] = _strip_gpu_resources(copy.deepcopy(value), src, out)
            out.mapped.append((src, "spec.podTemplate", "(pod template)"))
        else:
            out.unmapped.append((src, "no KGWE equivalent"))
    if memory_mib:
        numbers = {k: v for k, v in memory_mib.items() if isinstance(v, int | float) and v > 0}
        for k in memory_mib.keys() - numbers.keys():
            out.unmapped.append((k, f"not a positive number of MiB: {memory_mib[k]!r}"))
        if numbers:
            gb = mib_to_gb(max(numbers.values()))
            req["minMemoryGB"] = gb
            for k, v in numbers.items():
                out.mapped.append(
                    (k, "spec.gpuRequirements.minMemoryGB (MiB -> GB, the larger)", f"{v} MiB -> {gb}")
                )
    if "podTemplate" not in new and not _template_for("main", image, runtime, "spec.podTemplate", new, out):
        raise ConvertError(
            "spec.podTemplate: the source has no pod template; pass --image for its container, or --runtime "
            "NAME for a WorkloadRuntime's template"
        )


def _strip_gpu_resources(template: dict[str, Any], src: str, out: Conversion) -> dict[str, Any]:
    """GPU resources come from gpuRequirements; the template's own would be overwritten, so say so."""
    spec = template.get("spec") or {}
    for i, c in enumerate(spec.get("containers") or []):
        for section in ("limits", "requests"):
            res = ((c or {}).get("resources") or {}).get(section) or {}
            for name in [n for n in res if is_gpu_resource(n)]:
                out.mapped.append(
                    (
                        f"{src}.spec.containers[{i}].resources.{section}[{name}]",
                        "spec.gpuRequirements",
                        res[name],
                    )
                )
                del res[name]
            if section in ((c or {}).get("resources") or {}) and not res:
                del c["resources"][section]
        if (c or {}).get("resources") == {}:
            del c["resources"]
    return template


# Relative PriorityClass values for the seeds' priority words, for `kgwe convert --suggest` (a starting point:
# the PriorityClasses of a cluster are the operator's; a higher value preempts a lower one).
PRIORITY_WORD_VALUES: dict[str, int] = {
    "critical": 100000,
    "high": 10000,
    "medium": 1000,
    "normal": 1000,
    "low": 100,
}


def suggested_scoring_profile(strategy_name: str) -> dict[str, Any]:
    """A ScoringProfile serving `strategy_name`, named after it (LeastLoaded -> least-loaded)."""
    name = re.sub(r"(?<!^)(?=[A-Z])", "-", strategy_name).lower()
    return {
        "apiVersion": API_VERSION,
        "kind": "ScoringProfile",
        "metadata": {"name": name},
        "spec": {"strategy": strategy_name},
    }


def suggested_priority_class(name: str) -> dict[str, Any]:
    """A PriorityClass for a seed's priority word."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": PRIORITY_WORD_VALUES.get(name, 1000),
        "globalDefault": False,
        "description": f"GPU workloads converted with priority {name!r}",
    }
