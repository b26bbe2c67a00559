"""WorkloadRuntime: the pod template a GPUWorkload gets when it brings none, per framework and workload type.

Modelled on Kubeflow Trainer's ClusterTrainingRuntime: the platform team keeps one named template per
framework (image, command, env, ports) in the policy repository, with the distributed launcher's wiring
(`launcher`: which rendezvous environment KGWE sets), and a data scientist writes only what the job needs
(`framework: PyTorch`, `workloadType: DistributedTraining`, GPUs). The template is checked against the
Kubernetes PodTemplateSpec schema like a workload's own (kgwe.policy.pod_template).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from kgwe.policy.base import KgweModel, KgweObject, ObjectMeta
from kgwe.policy.gpu_workload import WorkloadType, check_template

# Which distributed environment the pods get (kgwe.workloads.plan): torchrun's PET_* variables, JAX's
# coordinator variables, or only KGWE's own MASTER_ADDR/MASTER_PORT and rank offset.
Launcher = Literal["Torchrun", "JAX", "None"]
LAUNCHERS: tuple[str, ...] = ("Torchrun", "JAX", "None")
# A workload without a runtime still gets its framework's launcher (the GPUWorkload API's first rule).
FRAMEWORK_LAUNCHERS: dict[str, str] = {"pytorch": "Torchrun", "torch": "Torchrun", "jax": "JAX"}
DEFAULT_RENDEZVOUS_PORT = 29500  # torchrun's and Kubeflow Trainer's default


def framework_key(framework: str | None) -> str:
    """How frameworks are compared: case and surrounding space do not matter (PyTorch == pytorch)."""
    return (framework or "").strip().lower()


def launcher_for_framework(framework: str | None) -> str:
    return FRAMEWORK_LAUNCHERS.get(framework_key(framework), "None")


class WorkloadRuntimeSpec(KgweModel):
    """The framework and workload types served, the launcher's wiring, and the pod template."""

    framework: str = Field(min_length=1, max_length=63)
    """The GPUWorkload `spec.framework` it serves, compared without regard to case (`PyTorch` =
    `pytorch`)."""
    workload_types: list[WorkloadType] = Field(min_length=1, max_length=6)
    """The workload types it serves; one runtime per framework and type in a repository."""
    launcher: Launcher = "None"
    """The rendezvous environment the pods of a batch workload get (docs/spec/workloadruntime.md);
    `None` for serving types (a Deployment has no rendezvous)."""
    rendezvous_port: int = Field(default=DEFAULT_RENDEZVOUS_PORT, ge=1, le=65535)
    """The first pod's rendezvous port (headless Service port, `MASTER_PORT`); a workload's
    `distributedConfig.masterPort` overrides it."""
    template: dict[str, Any]
    """The pods' core/v1 PodTemplateSpec, with its containers; checked like a workload's own."""

    @field_validator("template")
    @classmethod
    def _template(cls, v: dict[str, Any]) -> dict[str, Any]:
        check_template(v, require_containers=True)
        return v

    @field_validator("workload_types")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        dup = sorted({t for t in v if v.count(t) > 1})
        if dup:
            raise ValueError(f"workload type(s) listed twice: {', '.join(dup)}")
        return v


class WorkloadRuntime(KgweObject):
    """The pod template a GPUWorkload gets when it brings none, per framework and workload type."""

    KIND: ClassVar[str] = "WorkloadRuntime"
    kind: Literal["WorkloadRuntime"] = "WorkloadRuntime"
    metadata: ObjectMeta
    spec: WorkloadRuntimeSpec
    """What it serves and the template it gives."""
