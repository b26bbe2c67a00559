"""Routing that fails open: a pod creator must not get a GPU pod past KGWE's scheduler. Every well-formed
review gets a decision (however many containers the pod has: the body is bounded already), a pod the webhook
cannot read is refused, and the API server sends the webhook exactly the pods it routes — failing closed for
those (failurePolicy Fail), so with the webhook down a GPU pod of an opted-in namespace is refused, never
created unrouted, while every other pod is created at once."""

from __future__ import annotations

import base64
import copy
import secrets
import ssl
from collections.abc import Iterator

import orjson
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.admission.decision import decide, review
from kgwe.admission.server import LIMITS, make_handler
from kgwe.httpd import ServerThread
from kgwe.localcluster.pki import write_pki
from kgwe.resources import deploy_dir
from kgwe.tlsfiles import ServingTLS
from kgwe.vocab import SCHEDULING_ENABLED, SCHEDULING_NAMESPACE_LABEL, WEBHOOK_CONFIGURATION
from tests.admission.test_admission_server import call
from tests.harness.deployed import eventually
from tests.harness.pytest_cluster import delete_namespace


def _pod(containers: list[dict], init: list[dict] | None = None, scheduler: str | None = None) -> dict:
    spec: dict = {"containers": containers, "terminationGracePeriodSeconds": 0}
    if init:
        spec["initContainers"] = init
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def _container(i: int, limits: dict | None = None, requests: dict | None = None) -> dict:
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    return {"name": f"c{i}", "image": "busybox", "resources": resources}


def _review(pod: object) -> bytes:
    request = {"uid": "u-1", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": pod}
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


MANY = [_container(i) for i in range(1500)] + [_container(1500, limits={"nvidia.com/gpu": "1"})]


def test_a_gpu_hidden_behind_many_containers_is_still_routed():
    answer, decision = review(_review(_pod(MANY)))
    response = orjson.loads(answer)["response"]
    assert response["allowed"] is True and decision.patch
    assert orjson.loads(base64.b64decode(response["patch"]))[0]["value"] == "kgwe-scheduler"


@pytest.mark.parametrize(
    "pod",
    [
        {"spec": {"containers": [None, _container(1, limits={"nvidia.com/gpu": "1"})]}},
        {"spec": {"containers": [{"resources": {"limits": ["nvidia.com/gpu"]}}]}},
        {"spec": {"containers": "nvidia.com/gpu"}},
        {"spec": None},
    ],
)
def test_a_pod_the_webhook_cannot_read_is_refused_not_left_to_the_failure_policy(pod):
    answer, _ = review(_review(pod))
    response = orjson.loads(answer)["response"]
    assert response["allowed"] is False and response["status"]["message"].startswith("kgwe-scheduling:")


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[int, ssl.SSLContext]]:
    pki = write_pki(tmp_path / "pki")
    tls = ServingTLS(pki.serving_cert, pki.serving_key)
    assert tls.reload(force=True)
    server = ServerThread(make_handler(), ("127.0.0.1", 0), limits=LIMITS, tls=tls.current).start()
    yield server.port, ssl.create_default_context(cafile=str(pki.ca_cert))
    server.stop()


def test_the_served_webhook_answers_every_well_formed_review_with_a_decision(served):
    for pod, allowed, routed in ((_pod(MANY), True, True), ({"spec": {"containers": [3]}}, False, False)):
        status, _, body = call(served, "POST", "/mutate-pods", _review(pod))
        assert status == 200, body
        response = orjson.loads(body)["response"]
        assert response["allowed"] is allowed and ("patch" in response) is routed


# ---- on the real API server: what it sends the webhook, and what happens while the webhook is down -------

CASES = {
    "gpu": _pod([_container(0, limits={"nvidia.com/gpu": "1"})]),
    "gpu-requests": _pod([_container(0, requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"})]),
    "shared": _pod([_container(0, limits={"nvidia.com/gpu.shared": "1"})]),
    "mig": _pod([_container(0, limits={"nvidia.com/mig-1g.10gb": "1"})]),
    "gpu-in-an-init-container": _pod([_container(0)], init=[_container(1, limits={"nvidia.com/gpu": "1"})]),
    "gpu-in-the-last-of-many": _pod(
        [_container(i) for i in range(40)] + [_container(40, {"nvidia.com/gpu": "1"})]
    ),
    "gpu-default-scheduler": _pod(
        [_container(0, limits={"nvidia.com/gpu": "1"})], scheduler="default-scheduler"
    ),
    "cpu": _pod([_container(0, limits={"cpu": "100m"})]),
    "no-resources": _pod([_container(0)]),
    "another-vendor": _pod([_container(0, limits={"amd.com/gpu": "1"})]),
    "gpu-another-scheduler": _pod([_container(0, limits={"nvidia.com/gpu": "1"})], scheduler="volcano"),
    "gpu-kgwe-scheduler": _pod([_container(0, limits={"nvidia.com/gpu": "1"})], scheduler="kgwe-scheduler"),
}


@pytest.fixture
def webhook_down(k8s_api) -> Iterator[None]:
    """deploy/'s MutatingWebhookConfiguration, its Service pointing nowhere: the webhook is down. Under a
    name of its own: the session control plane may hold deploy/'s (tests/deploy/test_deploy_components)."""
    docs = yaml.safe_load_all((deploy_dir() / "webhook" / "webhook.yaml").read_text())
    config = next(d for d in docs if d and d["kind"] == "MutatingWebhookConfiguration")
    config = copy.deepcopy(config)
    name = config["metadata"]["name"] = f"{WEBHOOK_CONFIGURATION}-down-{secrets.token_hex(3)}"
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": "https://127.0.0.1:1/mutate-pods", "caBundle": ""}
    admission = client.AdmissionregistrationV1Api(k8s_api)
    admission.create_mutating_webhook_configuration(config)
    yield
    admission.delete_mutating_webhook_configuration(name)


@pytest.mark.cluster
def test_with_the_webhook_down_gpu_pods_are_refused_and_others_created(k8s_api, webhook_down):
    core = client.CoreV1Api(k8s_api)
    namespace = f"routing-{secrets.token_hex(3)}"
    labels = {SCHEDULING_NAMESPACE_LABEL: SCHEDULING_ENABLED}
    core.create_namespace({"metadata": {"name": namespace, "labels": labels}})

    def create(name: str, pod: dict) -> bool:
        """True: created; False: refused by the (down) webhook."""
        body = copy.deepcopy(pod)
        body["metadata"]["name"] = f"{name}-{secrets.token_hex(2)}"
        try:
            core.create_namespaced_pod(namespace, body, dry_run="All")
        except ApiException as exc:
            assert "scheduling.kgwe.nvidia.io" in (exc.body or ""), exc.body
            return False
        return True

    try:
        eventually(lambda: not create("probe", CASES["gpu"]), "the webhook configuration in force")
        for name, pod in CASES.items():
            routed = bool(decide(pod).patch)
            assert create(name, pod) is not routed, name  # sent (and refused) exactly when it would be routed
    finally:
        delete_namespace(core, namespace)
