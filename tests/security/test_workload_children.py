"""GPUWorkload children are never taken over by name: a child is created only when its name is free and
updated only while the workload controls it; anything else is a refusal in the workload's status, and the
object of that name (a StatefulSet's headless Service, another team's Job) stays exactly as it was — also
when the workload is deleted. On the real API server, with the controller's own rights (the chart's RBAC)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from kgwe.cluster.client import ensure_namespace
from kgwe.cluster.events import EventRecorder
from kgwe.policy.gpu_workload import GPUWorkload
from kgwe.policy.workload_resolution import Facts, child_refs, child_write
from kgwe.resources import deploy_dir
from kgwe.vocab import API_GROUP as GROUP
from kgwe.vocab import (
    API_VERSION,
    KGWE_NAMESPACE,
    POD_TEMPLATE_POLICY_CONFIGMAP,
    POD_TEMPLATE_POLICY_KEY,
    RUN_LABEL,
    WORKLOAD_LABEL,
    WORKLOADS_ENABLED,
    WORKLOADS_NAMESPACE_LABEL,
)
from kgwe.vocab import CRD_VERSION as VERSION
from kgwe.vocab import GPU_WORKLOAD_PLURAL as PLURAL
from kgwe.workloads.controller import WorkloadMetrics, WorkloadReconciler
from kgwe.workloads.plan import plan_children
from tests.harness.deployed import apply_docs, eventually

CONTROLLER_SA = "system:serviceaccount:kgwe-system:kgwe-controller"
UID = "0b9f6c1e-0000-4000-8000-000000000001"


def _owner(name: str = "train", uid: str = UID, controller: bool = True) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUWorkload",
        "name": name,
        "uid": uid,
        "controller": controller,
    }


@pytest.mark.parametrize(
    ("live", "uid", "action"),
    [
        (None, UID, "create"),
        ({"resourceVersion": "7", "ownerReferences": [_owner()]}, UID, "update"),
        # a workload of the same name deleted and made again: its old children are not this one's
        ({"resourceVersion": "7", "ownerReferences": [_owner(uid="older")]}, UID, "refuse"),
        ({"resourceVersion": "7", "ownerReferences": [_owner(controller=False)]}, UID, "refuse"),
        ({"resourceVersion": "7", "ownerReferences": [_owner(name="other")]}, UID, "refuse"),
        (
            {"resourceVersion": "7", "ownerReferences": [{**_owner(), "kind": "StatefulSet", "name": "db"}]},
            UID,
            "refuse",
        ),
        ({"resourceVersion": "7"}, UID, "refuse"),  # someone's own object
        ({"resourceVersion": "7", "ownerReferences": [_owner(uid="any")]}, None, "update"),  # validate
        ({"resourceVersion": "7"}, None, "refuse"),
    ],
)
def test_a_child_is_created_when_absent_updated_when_controlled_else_refused(live, uid, action):
    decision = child_write(live, "Service/train", "train", uid)
    assert decision.action == action
    if action == "update":
        assert decision.resource_version == "7"  # the object judged, as the update's precondition
    if action == "refuse":
        assert "Service/train already exists" in decision.why


WORKLOADS = {
    "batch": {"gpuRequirements": {"count": 8}, "distributedConfig": {"nodes": 2}},
    "roles": {
        "gpuRequirements": {"count": 1},
        "roles": [{"name": "launcher", "replicas": 1}, {"name": "worker", "replicas": 3}],
    },
    "serving": {"gpuRequirements": {"count": 1}, "workloadType": "Inference"},
}


@pytest.mark.parametrize("kind", list(WORKLOADS))
@pytest.mark.parametrize("gang", ["Native", "Kueue"])
def test_the_names_checked_are_the_names_planned(kind: str, gang: str):
    spec = copy.deepcopy(WORKLOADS[kind])
    spec["podTemplate"] = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    wl = GPUWorkload.model_validate(
        {"apiVersion": API_VERSION, "kind": "GPUWorkload", "metadata": {"name": "train"}, "spec": spec}
    )
    planned = plan_children(wl, "ml", UID, Facts(run=3, gang_backend=gang))
    assert child_refs(wl, 3, native_gang=gang == "Native", kueue=gang == "Kueue") == [
        (c["apiVersion"], c["kind"], c["metadata"]["name"]) for c in planned
    ]


# ---- on the real API server ---------------------------------------------------------------------------


def _as(api: client.ApiClient, user: str) -> client.ApiClient:
    impersonated = client.ApiClient(api.configuration)
    impersonated.set_default_header("Impersonate-User", user)
    return impersonated


@pytest.fixture
def reconciler(k8s_api, policy_crds, namespace) -> Iterator[WorkloadReconciler]:
    """The GPUWorkload reconciler as the controller's ServiceAccount with the chart's RBAC (deploy/controller:
    what it may do, and no more), its RoleBinding in the opted-in `namespace`."""
    core = client.CoreV1Api(k8s_api)
    ensure_namespace(k8s_api, "gpu-operator")  # where rbac.yaml's Roles are
    docs = [
        d
        for f in ("rbac.yaml", "workloads-rbac.yaml")
        for d in yaml.safe_load_all((deploy_dir() / "controller" / f).read_text())
        if d
    ]
    apply_docs(k8s_api, docs, "children-test")
    labels = {WORKLOADS_NAMESPACE_LABEL: WORKLOADS_ENABLED}
    core.patch_namespace(namespace, {"metadata": {"labels": labels}})
    made = False
    try:  # no PodTemplatePolicy: the controller's default (nothing beyond an ordinary pod) applies
        core.create_namespaced_config_map(
            KGWE_NAMESPACE,
            {"metadata": {"name": POD_TEMPLATE_POLICY_CONFIGMAP}, "data": {POD_TEMPLATE_POLICY_KEY: "[]"}},
        )
        made = True
    except ApiException as exc:
        if exc.status != 409:
            raise
    confined = WorkloadReconciler(
        _as(k8s_api, CONTROLLER_SA),
        recorder=EventRecorder(k8s_api),
        metrics=WorkloadMetrics(CollectorRegistry()),
        is_leader=lambda: True,
    )
    stop = threading.Event()
    threading.Thread(target=confined.grants.run, args=(stop, 5), daemon=True).start()
    assert confined.grants.listed.wait(30)
    eventually(lambda: confined.grants.refused(namespace) is None, "the opt-in seen")
    confined.grants.sync()  # its RoleBinding in the opted-in namespace, as its worker writes it
    yield confined
    stop.set()
    if made:
        core.delete_namespaced_config_map(POD_TEMPLATE_POLICY_CONFIGMAP, KGWE_NAMESPACE)


def _admitted(k8s_api, namespace: str, name: str) -> dict:
    wl = client.CustomObjectsApi(k8s_api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == "Admitted"), {})


def _workload(name: str) -> dict:
    """A one-pod training GPUWorkload with a template of its own."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUWorkload",
        "metadata": {"name": name},
        "spec": {
            "gpuRequirements": {"count": 1},
            "gang": {"backend": "None"},
            "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
        },
    }


VICTIM = {
    "metadata": {"name": "db", "labels": {"app": "db"}},
    "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"name": "pg", "port": 5432}]},
}


@pytest.mark.cluster
def test_a_workload_named_after_a_service_leaves_it_alone(k8s_api, namespace, reconciler):
    core, custom = client.CoreV1Api(k8s_api), client.CustomObjectsApi(k8s_api)
    core.create_namespaced_service(namespace, VICTIM)  # a StatefulSet's headless Service, say
    before = core.read_namespaced_service("db", namespace)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _workload("db"))
    eventually(lambda: reconciler.reconcile(namespace, "db") or _admitted(k8s_api, namespace, "db"), "a look")
    admitted = _admitted(k8s_api, namespace, "db")
    assert (admitted["status"], admitted["reason"]) == ("False", "ChildNameTaken"), admitted
    assert "Service/db already exists" in admitted["message"]
    after = core.read_namespaced_service("db", namespace)
    assert after.metadata.resource_version == before.metadata.resource_version  # not even re-written
    assert after.spec.selector == {"app": "db"} and [p.port for p in after.spec.ports] == [5432]
    assert not after.metadata.owner_references
    assert not client.BatchV1Api(k8s_api).list_namespaced_job(namespace).items  # nothing half-made
    # deleting the workload deletes nothing of the victim's (it never became its owner)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "db")
    assert core.read_namespaced_service("db", namespace).metadata.uid == before.metadata.uid


@pytest.mark.cluster
def test_a_job_wearing_the_workloads_labels_is_neither_counted_nor_deleted(k8s_api, namespace, reconciler):
    """Labels are anyone's to set: a Failed Job labelled as run 0 of the workload does not make the gang
    restart, and a restart never deletes a Job the workload does not control."""
    batch, custom = client.BatchV1Api(k8s_api), client.CustomObjectsApi(k8s_api)
    planted = {
        "metadata": {"name": "someone-elses", "labels": {WORKLOAD_LABEL: "train", RUN_LABEL: "0"}},
        "spec": {
            "suspend": True,  # no pods: its status is what the test writes
            "backoffLimit": 0,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
            },
        },
    }
    batch.create_namespaced_job(namespace, planted)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _workload("train"))
    eventually(
        lambda: (
            reconciler.reconcile(namespace, "train") is not None
            and _admitted(k8s_api, namespace, "train").get("status") == "True"
        ),
        "admitted",
    )
    jobs = {j.metadata.name for j in batch.list_namespaced_job(namespace).items}
    assert jobs == {"someone-elses", "train-r0-worker"}
    # the planted Job fails (as its owner may say through its status)
    when = "2026-11-24T00:00:00Z"
    failed = {"status": "True", "reason": "BackoffLimitExceeded", "message": "m", "lastTransitionTime": when}
    batch.patch_namespaced_job_status(
        "someone-elses",
        namespace,
        {
            "status": {
                "startTime": when,
                "conditions": [{"type": "FailureTarget", **failed}, {"type": "Failed", **failed}],
            }
        },
    )
    reconciler.reconcile(namespace, "train")
    wl = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "train")
    assert not (wl["status"].get("retryCount") or 0) and wl["status"].get("run", 0) == 0
    assert {j.metadata.name for j in batch.list_namespaced_job(namespace).items} == jobs
