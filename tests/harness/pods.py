"""Pods for the cluster tests: a simulated GPU pod pinned to a node."""

from __future__ import annotations

from kubernetes import client


def gpu_pod(
    name: str,
    node: str,
    gpus: int = 1,
    labels: dict[str, str] | None = None,
    image: str = "x",
    scheduler: str | None = None,
) -> client.V1Pod:
    """A pod holding `gpus` whole GPUs on `node` (tolerating every taint, no grace period), scheduled by
    `scheduler` (e.g. kgwe-scheduler; default: the default scheduler)."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            scheduler_name=scheduler,
            node_selector={"kubernetes.io/hostname": node},
            tolerations=[client.V1Toleration(operator="Exists")],
            termination_grace_period_seconds=0,
            containers=[
                client.V1Container(
                    name="c",
                    image=image,
                    resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)}),
                )
            ],
        ),
    )
