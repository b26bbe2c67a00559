"""Against the real API server and kube-scheduler: CRDs install and enforce their schema, custom resources
read back into the models, rendered objects pass a server-side dry run, and kube-scheduler accepts the
rendered KubeSchedulerConfiguration."""

from __future__ import annotations

import copy

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from kgwe.cluster.crds import install_crds
from kgwe.policy import GPUWorkload, PolicyRepository, load_repository
from kgwe.policy.schema_export import CRD_KINDS, crd
from kgwe.render import RenderOptions, render
from kgwe.resources import sample_repo_dir
from kgwe.vocab import API_GROUP

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def crds(k8s_api):
    install_crds(k8s_api, [crd(model) for model in CRD_KINDS], update=True)  # the models' CRDs, as rendered
    return k8s_api


POLICY_REPOSITORY = {
    "apiVersion": "kgwe.nvidia.io/v1",
    "kind": "PolicyRepository",
    "metadata": {"name": "gpu-policy"},
    "spec": {
        "url": "https://git.example.com/platform/gpu-policy.git",
        "ref": {"branch": "main"},
        "path": "clusters/prod",
        "interval": "1m",
        "secretRef": {"name": "gpu-policy-git"},
        "suspend": False,
        "reports": {"branch": "main", "path": "reports/prod", "schedule": "0 6 * * *"},
    },
}

GPU_WORKLOAD = {
    "apiVersion": "kgwe.nvidia.io/v1",
    "kind": "GPUWorkload",
    "metadata": {"name": "llm-training"},
    "spec": {
        "gpuRequirements": {
            "count": 8,
            "minMemoryGB": 40,
            "topology": {"preference": "NVLinkOptimal", "minBandwidthGBps": 600},
        },
        "workloadType": "Training",
        "framework": "PyTorch",
        "podTemplate": {"spec": {"containers": [{"name": "trainer", "image": "pytorch:latest"}]}},
    },
}


def test_custom_resources_round_trip_through_the_api_server(crds, namespace):
    custom = client.CustomObjectsApi(crds)
    for body, model, plural in (
        (POLICY_REPOSITORY, PolicyRepository, "policyrepositories"),
        (GPU_WORKLOAD, GPUWorkload, "gpuworkloads"),
    ):
        custom.create_namespaced_custom_object(API_GROUP, "v1", namespace, plural, copy.deepcopy(body))
        stored = custom.get_namespaced_custom_object(
            API_GROUP, "v1", namespace, plural, body["metadata"]["name"]
        )
        obj = model.model_validate(stored)  # server metadata (uid, managedFields...) is accepted
        assert obj.spec.model_dump(by_alias=True, mode="json", exclude_defaults=True) == model.model_validate(
            body
        ).spec.model_dump(by_alias=True, mode="json", exclude_defaults=True)
        status = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Applied"}]}}
        custom.patch_namespaced_custom_object_status(
            API_GROUP, "v1", namespace, plural, body["metadata"]["name"], status
        )


@pytest.mark.parametrize(
    ("plural", "body", "field"),
    [
        (
            "policyrepositories",
            {**POLICY_REPOSITORY, "spec": {**POLICY_REPOSITORY["spec"], "interval": 60}},
            "interval",
        ),
        ("gpuworkloads", {**GPU_WORKLOAD, "spec": {"gpuRequirements": {"count": 0}}}, "count"),
        (
            "gpuworkloads",
            {**GPU_WORKLOAD, "spec": {"gpuRequirements": {"topology": {"preference": "Fast"}}}},
            "preference",
        ),
    ],
)
def test_crd_schema_rejects_invalid_objects(crds, namespace, plural, body, field):
    custom = client.CustomObjectsApi(crds)
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(API_GROUP, "v1", namespace, plural, copy.deepcopy(body))
    assert info.value.status == 422 and field in info.value.body


def test_rendered_objects_pass_a_server_side_dry_run(k8s_api, namespace):
    ps = load_repository(sample_repo_dir())
    result = render(ps, options=RenderOptions(namespace=namespace, mig_namespace=namespace))
    checked = 0
    for obj in result.objects:
        if obj["kind"] == "Node":
            continue  # label patches on existing nodes; validated offline against the OpenAPI schema
        body = copy.deepcopy(obj)
        body["metadata"]["namespace"] = namespace  # quotas go to budget namespaces; one test namespace here
        utils.create_from_dict(k8s_api, body, namespace=namespace, dry_run="All")
        checked += 1
    assert checked >= 3 + len([ns for b in ps.budgets for ns in b.spec.namespaces]) - 1


def test_kube_scheduler_accepts_the_rendered_configuration(control_plane, tmp_path):
    """Both shapes: the extender in the scheduler's pod (plain HTTP on loopback, the default) and the
    standalone extender Service over mutual TLS."""
    from kgwe.localcluster.pki import write_mtls_dirs
    from kgwe.render.render import RenderOptions, standalone_extender_url

    _, client_dir = write_mtls_dirs(tmp_path)  # kube-scheduler loads the client certificate at startup
    ps = load_repository(sample_repo_dir())
    for options in (
        RenderOptions(),
        RenderOptions(
            extender_url=standalone_extender_url("kgwe-system"), extender_client_cert_dir=str(client_dir)
        ),
    ):
        (cm,) = [
            o for o in render(ps, options=options).objects if o["metadata"]["name"] == "kgwe-scheduler-config"
        ]
        config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
        with control_plane.using_scheduler_config(config):  # kube-scheduler validates it at startup
            pass


def test_kube_scheduler_check_can_fail(control_plane):
    """The acceptance test above means something: a broken extender entry is refused at startup."""
    ps = load_repository(sample_repo_dir())
    (cm,) = [o for o in render(ps).objects if o["metadata"]["name"] == "kgwe-scheduler-config"]
    config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    config["extenders"][0]["weight"] = 0  # invalid with a prioritizeVerb (docs/facts/scheduler.md)
    previous = dict(control_plane.scheduler_config)
    try:
        with pytest.raises(Exception):  # noqa: B017 - whatever the harness raises, startup must fail
            control_plane.start_scheduler(config)
    finally:
        control_plane.start_scheduler(previous)
