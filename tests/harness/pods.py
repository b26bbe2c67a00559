"""Pods for the cluster tests: a simulated GPU pod pinned to a node; on the local GPU node, a pod that
prints the GPUs NVIDIA's device plugin allocated it."""

from __future__ import annotations

from typing import Any

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


# A container that prints the GPUs NVIDIA's device plugin gave it (the local GPU node's pods: no NVIDIA
# Container Toolkit mounts devices in, the plugin's allocation arrives as this variable) and stays.
SHOW_DEVICES = "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; sleep 3600"


def devices_container(image: str, gpus: int | None = None) -> dict[str, Any]:
    """The container printing its NVIDIA_VISIBLE_DEVICES, asking for `gpus` whole GPUs when given (a
    GPUWorkload's pod template leaves that to KGWE)."""
    container: dict[str, Any] = {
        "name": "c",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", SHOW_DEVICES],
    }
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return container


def devices_pod(name: str, gpus: int, image: str, node: str) -> dict[str, Any]:
    """A pod on `node` asking for `gpus` whole GPUs and printing which it got (no grace period)."""
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 0,
            "containers": [devices_container(image, gpus)],
        },
    }


def visible_devices(api: client.ApiClient, namespace: str, pod: str) -> list[str]:
    """The GPU UUIDs a devices_container printed ([] until it has)."""
    from kubernetes.client.exceptions import ApiException

    try:
        log = client.CoreV1Api(api).read_namespaced_pod_log(pod, namespace) or ""
    except ApiException:  # not started yet
        return []
    line = next((x for x in log.splitlines() if x.startswith("NVIDIA_VISIBLE_DEVICES=")), "")
    return [u for u in line.split("=", 1)[-1].split(",") if u]
