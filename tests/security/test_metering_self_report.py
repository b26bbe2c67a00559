"""A pod cannot opt out of metering, nor shrink what it holds, with what it says about itself: whole GPUs and
MIG instances are charged whatever its kgwe.nvidia.io/gpu-milli annotation says; the annotation only sizes
a share of nvidia.com/gpu.shared, and absent or unreadable it means the share the extender placed the pod
with. The extender likewise counts a bound pod by its resources whatever its annotations became, and the
chart's ValidatingAdmissionPolicy (on the real API server) keeps the annotation as fixed as the resources."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.cost.metering import Meter, NodeInfo, Start
from kgwe.cost.usage import MIG, SHARED, WHOLE
from kgwe.extender.k8s import account, node_state, pod_holds
from kgwe.resources import deploy_dir
from tests.harness.deployed import apply_docs

H100 = "NVIDIA-H100-80GB-HBM3"
T0 = datetime(2026, 10, 1, tzinfo=UTC)
NODES = {"gpu-0": NodeInfo("gpu-0", H100, 8, False), "ts-0": NodeInfo("ts-0", H100, 8, False, replicas=4)}
MILLI = "kgwe.nvidia.io/gpu-milli"


def pod(resources: dict, annotations: dict | None = None, node: str = "gpu-0", name: str = "p") -> dict:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "annotations": annotations or {}},
        "spec": {"nodeName": node, "containers": [{"resources": {"limits": resources}}]},
        "status": {"phase": "Running", "startTime": T0.isoformat()},
    }


def charged(p: dict) -> list[tuple]:
    actions = Meter(NODES).observe("ADDED", p, T0)
    assert all(isinstance(a, Start) for a in actions), actions  # never skipped
    return [
        (a.interval.kind, a.interval.count, a.interval.mig_profile, a.interval.gpu_milli) for a in actions
    ]


@pytest.mark.parametrize("value", ["1", "999", "0", "-5", "abc", "", "1e9", "nan"])
def test_whole_gpus_are_charged_whatever_the_annotation_says(value: str) -> None:
    assert charged(pod({"nvidia.com/gpu": "8"}, {MILLI: value})) == [(WHOLE, 8, None, None)]


def test_mig_instances_are_charged_whatever_the_annotation_says() -> None:
    held = pod({"nvidia.com/mig-3g.40gb": "2", "nvidia.com/gpu": "1"}, {MILLI: "1"})
    assert sorted(charged(held)) == [(MIG, 2, "3g.40gb", None), (WHOLE, 1, None, None)]


@pytest.mark.parametrize(
    ("annotations", "share"),
    [
        ({MILLI: "250"}, 250),  # the annotation describes the share: honoured
        ({MILLI: "250.9"}, 250),  # read as the extender reads it
        ({}, 1000),  # absent: the extender's default, 1000 / units
        ({MILLI: "0"}, 1000),  # unreadable: the same default, never nothing
        ({MILLI: "1500"}, 1000),
        ({MILLI: "a lot"}, 1000),
    ],
)
def test_a_shared_gpu_is_charged_its_share_or_the_default(annotations: dict, share: int) -> None:
    assert charged(pod({"nvidia.com/gpu.shared": "1"}, annotations)) == [(SHARED, 1, None, share)]


def test_on_a_replicated_node_the_annotation_cannot_go_below_a_replica() -> None:
    assert charged(pod({"nvidia.com/gpu": "1"}, {MILLI: "1"}, node="ts-0")) == [(SHARED, 1, None, 250)]
    assert charged(pod({"nvidia.com/gpu.shared": "1"}, {MILLI: "1"}, node="ts-0")) == [(SHARED, 1, None, 250)]


def test_the_extender_counts_a_bound_pod_by_what_it_holds() -> None:
    """Annotations edited after binding into something unreadable used to make the pod hold nothing, so its
    GPUs were offered again."""
    base = node_state(
        {
            "metadata": {"name": "gpu-0", "labels": {"nvidia.com/gpu.count": "8"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "nvidia.com/gpu.shared": "8"}},
        }
    )
    whole = pod({"nvidia.com/gpu": "8"}, {"kgwe.nvidia.io/topology-preference": "anything", MILLI: "x"})
    share = pod({"nvidia.com/gpu.shared": "1"}, {MILLI: "not a number"}, name="s")
    for bound, used in ((whole, [1000] * 8), (share, [1000] + [0] * 7)):
        held = pod_holds(bound)
        assert held is not None, bound
        assert account(base, [held]).gpu_used_milli == used
    pending = {**share, "spec": {**share["spec"], "nodeName": ""}}
    assert pod_holds(pending) is None  # unbound and unreadable: the filter refuses it too, it holds nothing


@pytest.mark.cluster
def test_the_share_annotation_is_fixed_once_the_pod_exists(k8s_api, namespace) -> None:
    policy = [
        d
        for d in yaml.safe_load_all((deploy_dir() / "controller" / "gpu-share-policy.yaml").read_text())
        if d
    ]
    apply_docs(k8s_api, policy, "gpu-share-test")
    core = client.CoreV1Api(k8s_api)
    body = {
        "metadata": {"name": "shared", "annotations": {MILLI: "500"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}
            ]
        },
    }
    core.create_namespaced_pod(namespace, body)
    core.create_namespaced_pod(namespace, {**body, "metadata": {"name": "plain"}})

    def patch(name: str, annotations: dict) -> int:
        try:
            core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": annotations}})
            return 200
        except ApiException as exc:
            return exc.status

    deadline = time.monotonic() + 30  # the API server enforces a policy once it has loaded it
    while patch("shared", {MILLI: "100"}) == 200:
        assert time.monotonic() < deadline, "the share annotation could be lowered: policy not enforced"
        core.patch_namespaced_pod("shared", namespace, {"metadata": {"annotations": {MILLI: "500"}}})
        time.sleep(0.5)
    assert patch("shared", {MILLI: None}) in (403, 422)  # removed: the default share, maybe smaller
    assert patch("plain", {MILLI: "1"}) in (403, 422)  # added after the pod took its place
    assert patch("shared", {"team.example.com/note": "fine"}) == 200  # other annotations stay editable
    assert core.read_namespaced_pod("shared", namespace).metadata.annotations[MILLI] == "500"
