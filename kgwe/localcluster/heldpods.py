"""Ending a held Job pod on a simulated GPU node, as its kubelet would when the container exits.

kwok finishes a Job's pod at once unless the pod carries KWOK_HOLD_ANNOTATION (kwok-stages.yaml); a held pod
runs until someone writes its end status, which is what `finish_held_pod` does (the demo's batch job ends
this way, after it has held its GPUs long enough to be metered).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kgwe.timestamps import format_rfc3339

if TYPE_CHECKING:
    from kubernetes import client


def finish_held_pod(api: client.ApiClient, pod: client.V1Pod, *, ok: bool = True) -> None:
    """Write `pod`'s end status (a kubernetes V1Pod): every container exited 0 (or 1 when not `ok`)."""
    from kubernetes import client

    now = format_rfc3339(datetime.now(UTC))
    code = 0 if ok else 1
    terminated = {
        "exitCode": code,
        "reason": "Completed" if ok else "Error",
        "startedAt": now,
        "finishedAt": now,
    }
    body = {
        "status": {
            "phase": "Succeeded" if ok else "Failed",
            "containerStatuses": [
                {
                    "name": c.name,
                    "image": c.image,
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
                for c in pod.spec.containers
            ],
        }
    }
    client.CoreV1Api(api).patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, body)
