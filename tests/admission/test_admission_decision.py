"""The routing decision and the AdmissionReview exchange, as pure functions."""

from __future__ import annotations

import base64

import orjson
import pytest

from kgwe.admission.decision import ReviewError, decide, review
from tests.admission.routing_cases import CASES, NO_GPU_RESOURCES, pod

ROUTE = ({"op": "add", "path": "/spec/schedulerName", "value": "kgwe-scheduler"},)


@pytest.mark.parametrize(("case", "manifest", "routed"), CASES, ids=[c[0] for c in CASES])
def test_the_routing_cases(case, manifest, routed):
    """The table the MutatingAdmissionPolicy is held to as well (tests/admission/test_routing_policy.py)."""
    assert decide(manifest).patch == (ROUTE if routed else ())


@pytest.mark.parametrize("resources", NO_GPU_RESOURCES)
def test_pods_without_nvidia_gpus_are_left_alone(resources):
    d = decide(pod(resources))
    assert d.patch == () and d.reason == "requests no GPU"


def test_a_pod_naming_another_scheduler_is_never_changed():
    d = decide(pod({"limits": {"nvidia.com/gpu": "8"}}, scheduler="volcano"))
    assert d.patch == () and "volcano" in d.reason
    assert decide(pod({"limits": {"nvidia.com/gpu": "8"}}, scheduler="kgwe-scheduler")).patch == ()


def test_the_scheduler_name_is_a_parameter():
    (op,) = decide(pod({"limits": {"nvidia.com/gpu": "1"}}), "gpu-scheduler").patch
    assert op["value"] == "gpu-scheduler"


def _review(obj: object, **request: object) -> bytes:
    req = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE"}
    req.update(request)
    req["object"] = obj
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})


def test_review_answers_with_a_base64_json_patch_and_the_uid():
    answer, decision = review(_review(pod({"limits": {"nvidia.com/gpu": "2"}})))
    doc = orjson.loads(answer)
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    resp = doc["response"]
    assert resp["uid"] == "u-1" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(resp["patch"])) == list(ROUTE) == list(decision.patch)


def test_review_of_an_unchanged_pod_or_another_operation_has_no_patch():
    for body in (
        _review(pod({"limits": {"cpu": "1"}})),
        _review(pod({"limits": {"nvidia.com/gpu": "1"}}), operation="UPDATE"),
        _review({"kind": "Service"}, kind={"kind": "Service"}),
    ):
        resp = orjson.loads(review(body)[0])["response"]
        assert resp == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "expected apiVersion"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request is missing"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 3}}',
            "request.uid",
        ),
    ],
)
def test_bodies_that_are_no_review_are_review_errors(body, message):
    with pytest.raises(ReviewError, match=message):
        review(body)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ("a string", "request.object"),
        ({"spec": []}, "no spec"),
        ({"spec": {"containers": {"a": 1}}}, "spec.containers is not a list"),
        ({"spec": {"schedulerName": 5, "containers": []}}, "schedulerName is not a string"),
        ({"spec": {"containers": [None, 3]}}, "a container is not an object"),
        ({"spec": {"containers": [{"resources": []}]}}, "resources is not an object"),
        ({"spec": {"containers": [{"resources": {"limits": ["x"]}}]}}, "resources.limits is not an object"),
    ],
)
def test_a_review_of_a_pod_that_cannot_be_read_is_refused_not_an_error(obj, message):
    """Fails closed: the API server gets a decision (allowed: false), never a 4xx it would ignore."""
    answer, decision = review(_review(obj))
    resp = orjson.loads(answer)["response"]
    assert resp["uid"] == "u-1" and resp["allowed"] is False and not decision.allowed
    assert message in resp["status"]["message"] and "patch" not in resp
