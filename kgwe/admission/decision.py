"""Which pods the admission webhook sends to the KGWE scheduler, and the AdmissionReview exchange. Pure.

A pod is routed (gets `spec.schedulerName: kgwe-scheduler`) when any of its containers or init containers
requests or limits `nvidia.com/gpu`, `nvidia.com/gpu.shared` or `nvidia.com/mig-*`, and it names no
scheduler or the default one (the chart's matchConditions send the API server's reviews of exactly these
pods, and the webhook fails closed for them). A pod that names another scheduler is never
changed: someone chose it. The namespace opt-in (label `kgwe.nvidia.io/scheduling: enabled`) is the webhook
configuration's namespaceSelector, checked by the API server before the pod reaches us.

Every well-formed review gets a decision, whatever the pod holds: every container is scanned (the body is
already bounded, MAX_BODY_BYTES), and a pod object that cannot be read is refused (`allowed: false`: it fails
closed; the API server would not store such a pod anyway). Only a body that is no AdmissionReview at all is
a `ReviewError` (the server answers 400): the API server never sends one.
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
CONTAINER_FIELDS = ("containers", "initContainers")


class ReviewError(ValueError):
    """The request is not a usable AdmissionReview (answered 400)."""


class PodUnreadable(ValueError):
    """The review is well formed but its pod is not a pod: refused (`allowed: false`)."""


@dataclass(frozen=True)
class Decision:
    patch: tuple[dict[str, Any], ...]  # JSON Patch operations; empty: the pod is left as it is
    reason: str  # why, for logs and metrics
    allowed: bool = True  # False: the pod is refused, `reason` says why


def _asks_gpu(container: object) -> bool:
    """Whether a container requests or limits a GPU resource."""
    if not isinstance(container, Mapping):
        raise PodUnreadable("a container is not an object")
    resources = container.get("resources")
    if resources is None:
        return False
    if not isinstance(resources, Mapping):
        raise PodUnreadable("resources is not an object")
    for field in ("requests", "limits"):
        amounts = resources.get(field)
        if amounts is None:
            continue
        if not isinstance(amounts, Mapping):
            raise PodUnreadable(f"resources.{field} is not an object")
        if any(isinstance(k, str) and is_gpu_resource(k) for k in amounts):
            return True
    return False


def requests_gpu(spec: Mapping[str, Any]) -> bool:
    """True when a container or init container asks for an NVIDIA GPU, GPU share or MIG instance. Every
    container is looked at: how many there are is bounded by the body."""
    found = False
    for field in CONTAINER_FIELDS:
        containers = spec.get(field) or []
        if not isinstance(containers, list):
            raise PodUnreadable(f"pod spec.{field} is not a list")
        for container in containers:
            found = _asks_gpu(container) or found  # each one read: an unreadable one is refused
    return found


def decide(pod: Mapping[str, Any], scheduler_name: str = SCHEDULER_NAME) -> Decision:
    """The patch that routes `pod` to `scheduler_name`, or none, with the reason; a pod that cannot be read
    is refused."""
    try:
        return _decide(pod, scheduler_name)
    except PodUnreadable as exc:
        return Decision((), f"refused: the pod cannot be read: {exc}", allowed=False)


def _decide(pod: Mapping[str, Any], scheduler_name: str) -> Decision:
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise PodUnreadable("pod has no spec object")
    named = spec.get("schedulerName") or ""
    if not isinstance(named, str):
        raise PodUnreadable("pod spec.schedulerName is not a string")
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
        if isinstance(pod, dict):
            decision = decide(pod, scheduler_name)
        else:
            decision = Decision((), "refused: request.object is missing or not an object", allowed=False)
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {"code": 400, "message": f"kgwe-scheduling: {decision.reason}"[:1024]}
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(decision.patch))).decode()
    out = {"apiVersion": REVIEW_API_VERSION, "kind": REVIEW_KIND, "response": response}
    return orjson.dumps(out), decision
