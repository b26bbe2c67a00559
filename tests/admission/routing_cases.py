"""The pods the routing decision is held to: the webhook's pure decision (test_admission_decision) and the
MutatingAdmissionPolicy the API server runs (test_routing_policy) answer each the same way."""

from __future__ import annotations

from typing import Any


def pod(resources: dict | None = None, *, init: dict | None = None, scheduler: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "x", "resources": resources or {}}]}
    if init is not None:
        spec["initContainers"] = [{"name": "init", "image": "x", "resources": init}]
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


GPU_RESOURCES = [
    {"limits": {"nvidia.com/gpu": "2"}},
    {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
    {"limits": {"nvidia.com/gpu.shared": "1"}},
    {"requests": {"nvidia.com/mig-1g.10gb": "1"}, "limits": {"nvidia.com/mig-1g.10gb": "1"}},
    {"limits": {"nvidia.com/mig-3g.40gb": "1"}, "requests": {"cpu": "1"}},
]
NO_GPU_RESOURCES = [
    {},
    {"limits": {"cpu": "1", "memory": "1Gi"}},
    {"limits": {"amd.com/gpu": "1"}},
    {"limits": {"nvidia.com/gpus": "1"}},
]

# (case id, pod, routed to kgwe-scheduler?)
CASES: list[tuple[str, dict[str, Any], bool]] = [
    *[(f"gpu-{i}", pod(r), True) for i, r in enumerate(GPU_RESOURCES)],
    *[(f"gpu-{i}-default", pod(r, scheduler="default-scheduler"), True) for i, r in enumerate(GPU_RESOURCES)],
    ("gpu-in-init", pod({"requests": {"cpu": "1"}}, init={"limits": {"nvidia.com/gpu": "1"}}), True),
    *[(f"no-gpu-{i}", pod(r), False) for i, r in enumerate(NO_GPU_RESOURCES)],
    ("another-scheduler", pod({"limits": {"nvidia.com/gpu": "8"}}, scheduler="volcano"), False),
    ("names-kgwe-scheduler", pod({"limits": {"nvidia.com/gpu": "8"}}, scheduler="kgwe-scheduler"), False),
]  # fmt: skip
