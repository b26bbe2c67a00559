"""Which pods the admission webhook sends to the KGWE scheduler, and the AdmissionReview exchange. Pure.

A pod is routed (gets `spec.schedulerName: kgwe-scheduler`) when any of its containers or init containers
requests or limits `nvidia.com/gpu`, `nvidia.com/gpu.shared` or `nvidia.com/mig-*`, and it names no
scheduler or the default one. A pod that names another scheduler is never changed: someone chose it. The
namespace opt-in (label `kgwe.nvidia.io/scheduling: enabled`) is the webhook configuration's
namespaceSelector, checked by the API server before the pod reaches us.

Every malformed review is a `ReviewError` (the server answers 400 with its message); a well-formed review
of anything else than a pod CREATE is allowed unchanged.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from kgwe.vocab import DEFAULT_SCHEDULER_NAME, SCHEDULER_NAME, is_gpu_resource

REVIEW_API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"
MAX_CONTAINERS = 1000  # far above any real pod; bounds the work a hostile review can ask for


class ReviewError(ValueError):
    """The request is not a usable AdmissionReview (answered 400)."""


@dataclass(frozen=True)
class Decision:
    patch: tuple[dict[str, Any], ...]  # JSON Patch operations; empty: the pod is left as it is
    reason: str  # why, for logs and metrics


def _gpu_container(container: object) -> bool:
    if not isinstance(container, Mapping):
        return False
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return False
    for field in ("requests", "limits"):
        amounts = resources.get(field)
        if isinstance(amounts, Mapping) and any(isinstance(k, str) and is_gpu_resource(k) for k in amounts):
            return True
    return False


def requests_gpu(spec: Mapping[str, Any]) -> bool:
    """True when a container or init container asks for an NVIDIA GPU, GPU share or MIG instance."""
    for field in ("containers", "initContainers"):
        containers = spec.get(field) or []
        if not isinstance(containers, list):
            raise ReviewError(f"pod spec.{field} is not a list")
        if len(containers) > MAX_CONTAINERS:
            raise ReviewError(f"pod spec.{field} has more than {MAX_CONTAINERS} entries")
        if any(_gpu_container(c) for c in containers):
            return True
    return False


def decide(pod: Mapping[str, Any], scheduler_name: str = SCHEDULER_NAME) -> Decision:
    """The patch that routes `pod` to `scheduler_name`, or none, with the reason."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise ReviewError("pod has no spec object")
    named = spec.get("schedulerName") or ""
    if not isinstance(named, str):
        raise ReviewError("pod spec.schedulerName is not a string")
    if named == scheduler_name:
        return Decision((), f"already names {scheduler_name}")
    if named not in ("", DEFAULT_SCHEDULER_NAME):
        return Decision((), f"names scheduler {named!r}; left alone")
    if not requests_gpu(spec):
        return Decision((), "requests no GPU")
    # "add" sets a member whether or not it exists (the API server has usually defaulted it already)
    return Decision(
        ({"op": "add", "path": "/spec/schedulerName", "value": scheduler_name},), "GPU pod routed"
    )


def review(body: bytes, scheduler_name: str = SCHEDULER_NAME) -> tuple[bytes, Decision]:
    """The AdmissionReview response for a request body, and the decision taken. ReviewError if malformed."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ReviewError("body is not a JSON object")
    if doc.get("apiVersion") != REVIEW_API_VERSION or doc.get("kind") != REVIEW_KIND:
        raise ReviewError(f"expected apiVersion {REVIEW_API_VERSION} kind {REVIEW_KIND}")
    request = doc.get("request")
    if not isinstance(request, dict):
        raise ReviewError("request is missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > 128:
        raise ReviewError("request.uid is missing or not a short string")
    kind_field = request.get("kind")
    kind = kind_field if isinstance(kind_field, dict) else {}
    if kind.get("kind") != "Pod" or request.get("operation") != "CREATE":
        decision = Decision((), "not a pod creation")
    else:
        pod = request.get("object")
        if not isinstance(pod, dict):
            raise ReviewError("request.object is missing or not an object")
        decision = decide(pod, scheduler_name)
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(decision.patch))).decode()
    out = {"apiVersion": REVIEW_API_VERSION, "kind": REVIEW_KIND, "response": response}
    return orjson.dumps(out), decision
