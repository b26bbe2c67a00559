"""The GPUWorkload controller is no deputy, on the real API server with the chart's RBAC and admission
policies applied (deploy/controller/): a user creates a workload only where that user may create what it
becomes; the controller creates pods' owners only in namespaces that opted in, cannot grant itself more,
writes no quota but kgwe-budget; and it refuses a pod template a PodTemplatePolicy does not allow — once,
with a condition, creating nothing."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from kgwe.cluster.client import ensure_namespace
from kgwe.cluster.events import EventRecorder
from kgwe.policy.gpu_workload import BATCH_TYPES
from kgwe.resources import deploy_dir
from kgwe.vocab import API_GROUP as GROUP
from kgwe.vocab import CRD_VERSION as VERSION
from kgwe.vocab import GPU_WORKLOAD_PLURAL as PLURAL
from kgwe.vocab import (
    POD_TEMPLATE_POLICY_CONFIGMAP,
    POD_TEMPLATE_POLICY_KEY,
    WORKLOAD_ROLEBINDING,
    WORKLOAD_WRITER_CLUSTERROLE,
    WORKLOADS_ENABLED,
    WORKLOADS_NAMESPACE_LABEL,
)
from kgwe.workloads.controller import (
    WorkloadController,
    WorkloadMetrics,
    WorkloadReconciler,
)
from kgwe.workloads.namespaces import NamespaceGrants
from tests.harness.deployed import apply_docs, eventually
from tests.harness.pytest_cluster import delete_namespace

pytestmark = pytest.mark.cluster

CONTROLLER_SA = "system:serviceaccount:kgwe-system:kgwe-controller"
FILES = ("rbac.yaml", "workloads-rbac.yaml", "workloads-admission.yaml")


def _docs() -> list[dict]:
    return [d for f in FILES for d in yaml.safe_load_all((deploy_dir() / "controller" / f).read_text()) if d]


def _as(api: client.ApiClient, user: str) -> client.ApiClient:
    impersonated = client.ApiClient(api.configuration)
    impersonated.set_default_header("Impersonate-User", user)
    return impersonated


def _refused(action: Callable[[], object], *words: str) -> str:
    with pytest.raises(ApiException) as err:
        action()
    assert err.value.status == 403, err.value.body
    for word in words:
        assert word in (err.value.body or ""), err.value.body
    return err.value.body or ""


def _opt_in(api: client.ApiClient, namespace: str, on: bool = True) -> None:
    label = {WORKLOADS_NAMESPACE_LABEL: WORKLOADS_ENABLED if on else None}
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": label}})


def _workload(name: str, workload_type: str = "Training", **template: Any) -> dict:
    spec = {"containers": [{"name": "main", "image": "busybox", **template.pop("container", {})}], **template}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUWorkload",
        "metadata": {"name": name},
        "spec": {
            "gpuRequirements": {"count": 1},
            "workloadType": workload_type,
            "podTemplate": {"spec": spec},
        },
    }


@pytest.fixture
def chart_policies(k8s_api, policy_crds) -> Iterator[None]:
    """deploy/controller's RBAC and admission policies on the API server; removed again afterwards (the
    session's other tests create GPUWorkloads as the cluster admin and must not meet them by surprise)."""
    ensure_namespace(k8s_api, "gpu-operator")
    docs = _docs()
    apply_docs(k8s_api, docs, "deputy-test")
    yield
    admission = client.AdmissionregistrationV1Api(k8s_api)
    for doc in docs:
        name = doc["metadata"]["name"]
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            admission.delete_validating_admission_policy_binding(name)
        elif doc["kind"] == "ValidatingAdmissionPolicy":
            admission.delete_validating_admission_policy(name)


@pytest.fixture
def other_namespace(k8s_api) -> Iterator[str]:
    name = f"not-opted-in-{secrets.token_hex(3)}"
    ensure_namespace(k8s_api, name)
    yield name
    delete_namespace(client.CoreV1Api(k8s_api), name)


def _grant(api: client.ApiClient, namespace: str, user: str, rules: list[dict]) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    name = f"{user}-{secrets.token_hex(2)}"
    rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def test_a_user_creates_a_workload_only_where_they_may_create_what_it_becomes(
    k8s_api, namespace, chart_policies
):
    workloads = {"apiGroups": [GROUP], "resources": ["gpuworkloads"], "verbs": ["create", "get", "patch"]}
    jobs = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}
    deployments = {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]}
    _grant(k8s_api, namespace, "alice", [workloads, jobs, deployments])
    _grant(k8s_api, namespace, "bob", [workloads])
    _grant(k8s_api, namespace, "carol", [workloads, jobs])

    def create(user: str, body: dict) -> object:
        api = client.CustomObjectsApi(_as(k8s_api, user))
        return api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    def bob_refused() -> bool:  # the policy takes effect a moment after it is created
        try:
            create("bob", _workload(f"probe-{secrets.token_hex(2)}"))
        except ApiException as exc:
            return exc.status == 403
        return False

    eventually(bob_refused, "the admission policy in force")
    _refused(lambda: create("bob", _workload("bobs")), "bob may not create jobs there")
    create("alice", _workload("training"))
    create("alice", _workload("serving", "Inference"))
    create("carol", _workload("carols"))
    _refused(
        lambda: create("carol", _workload("carols-serving", "Interactive")),
        "carol may not create deployments",
    )
    # a spec edit by someone who could not have created the workload is refused; metadata-only edits pass
    bobs = client.CustomObjectsApi(_as(k8s_api, "bob"))
    _refused(
        lambda: bobs.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "training", {"spec": {"suspend": True}}
        ),
        "bob may not create jobs",
    )
    bobs.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "training", {"metadata": {"labels": {"reviewed": "yes"}}}
    )


def test_the_admission_policy_knows_the_serving_kinds_the_model_knows():
    policy = next(d for d in _docs() if d["metadata"]["name"] == "kgwe-gpuworkload-creator")
    serving = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "serving")
    from typing import get_args

    from kgwe.policy.gpu_workload import WorkloadType

    kinds = [k for k in get_args(WorkloadType) if k not in BATCH_TYPES]
    assert f"in {kinds!r}" in serving.replace('"', "'")


@pytest.fixture
def controller_grants(k8s_api, chart_policies) -> Iterator[NamespaceGrants]:
    """The controller's namespace grants running as its ServiceAccount with only the chart's rights."""
    grants = NamespaceGrants(_as(k8s_api, CONTROLLER_SA), kgwe_namespace="kgwe-system")
    stop = threading.Event()
    threading.Thread(target=grants.run, args=(stop, 2), daemon=True).start()
    grants.listed.wait(30)
    yield grants
    stop.set()


def _job(namespace: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"j-{secrets.token_hex(3)}", "namespace": namespace},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
            }
        },
    }


def test_the_controller_writes_pods_owners_only_where_a_namespace_opted_in(
    k8s_api, namespace, other_namespace, controller_grants
):
    sa = _as(k8s_api, CONTROLLER_SA)
    batch = client.BatchV1Api(sa)
    _refused(lambda: batch.create_namespaced_job(namespace, _job(namespace)))  # not opted in yet
    _opt_in(k8s_api, namespace)
    eventually(lambda: controller_grants.refused(namespace) is None, "the opt-in seen")
    controller_grants.sync()
    rb = client.RbacAuthorizationV1Api(k8s_api).read_namespaced_role_binding(WORKLOAD_ROLEBINDING, namespace)
    assert rb.role_ref.name == WORKLOAD_WRITER_CLUSTERROLE
    assert [(s.kind, s.name, s.namespace) for s in rb.subjects] == [
        ("ServiceAccount", "kgwe-controller", "kgwe-system")
    ]
    eventually(
        lambda: batch.create_namespaced_job(namespace, _job(namespace)), "Jobs in the opted-in namespace"
    )
    _refused(lambda: batch.create_namespaced_job(other_namespace, _job(other_namespace)))
    deployment = {
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    _refused(lambda: client.AppsV1Api(sa).create_namespaced_deployment(other_namespace, deployment))
    # the label goes: so do the controller's rights there
    _opt_in(k8s_api, namespace, on=False)
    eventually(lambda: controller_grants.refused(namespace) is not None, "the opt-out seen")
    controller_grants.sync()

    def job_refused() -> bool:
        try:
            batch.create_namespaced_job(namespace, _job(namespace))
        except ApiException as exc:
            return exc.status == 403
        return False

    eventually(job_refused, "Jobs refused again")


def _binding(namespace: str, role: str = WORKLOAD_WRITER_CLUSTERROLE, **changes: Any) -> dict:
    body = {
        "metadata": {"name": WORKLOAD_ROLEBINDING},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "kgwe-controller", "namespace": "kgwe-system"}],
    }
    body.update(changes)
    return body


def test_the_controller_cannot_grant_itself_or_others_more(
    k8s_api, namespace, other_namespace, chart_policies
):
    sa = _as(k8s_api, CONTROLLER_SA)
    rbac = client.RbacAuthorizationV1Api(sa)
    _opt_in(k8s_api, namespace)
    tenant = [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]

    def create(ns: str, body: dict) -> object:
        return rbac.create_namespaced_role_binding(ns, body)

    def policies_in_force() -> bool:  # an admission policy takes effect a moment after it is created
        refused = []
        for attempt, undo in (
            (
                lambda: create(other_namespace, _binding(other_namespace)),
                lambda: rbac.delete_namespaced_role_binding(WORKLOAD_ROLEBINDING, other_namespace),
            ),
            (
                lambda: core.create_namespaced_resource_quota(
                    namespace, {"metadata": {"name": "probe"}, **quota}
                ),
                lambda: admin.delete_namespaced_resource_quota("probe", namespace),
            ),
        ):
            try:
                attempt()
                undo()
            except ApiException as exc:
                refused.append(exc.status == 403)
        return refused == [True, True]

    core, admin = client.CoreV1Api(sa), client.CoreV1Api(k8s_api)
    quota = {"spec": {"hard": {"requests.nvidia.com/gpu": "4"}}}
    eventually(policies_in_force, "the admission policies in force")
    _refused(lambda: create(other_namespace, _binding(other_namespace)), "has not opted in")
    _refused(lambda: create(namespace, _binding(namespace, subjects=tenant)), "only to itself")
    _refused(
        lambda: create(namespace, _binding(namespace, metadata={"name": "sneaky"})),
        "may only bind the ClusterRole kgwe-workload-writer",
    )
    _refused(lambda: create(namespace, _binding(namespace, role="admin")))  # RBAC: no `bind` on it
    _refused(lambda: create("kube-system", _binding("kube-system")))
    _refused(
        lambda: rbac.create_cluster_role_binding(
            {**_binding(namespace), "metadata": {"name": "kgwe-everywhere"}}
        )
    )
    _refused(
        lambda: rbac.patch_cluster_role(
            WORKLOAD_WRITER_CLUSTERROLE, {"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}
        )
    )
    _refused(
        lambda: core.patch_namespace(
            other_namespace, {"metadata": {"labels": {WORKLOADS_NAMESPACE_LABEL: "enabled"}}}
        )
    )
    admission = client.AdmissionregistrationV1Api(sa)
    _refused(lambda: admission.delete_validating_admission_policy_binding("kgwe-controller-rolebindings"))
    # ResourceQuotas: kgwe-budget only, and only outside kube-* and KGWE's namespace
    admin.create_namespaced_resource_quota(namespace, {"metadata": {"name": "team-quota"}, **quota})
    _refused(lambda: core.patch_namespaced_resource_quota("team-quota", namespace, {"spec": {"hard": {}}}))
    _refused(lambda: core.delete_namespaced_resource_quota("team-quota", namespace))
    _refused(
        lambda: core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "other"}, **quota}),
        "only the ResourceQuota kgwe-budget",
    )
    _refused(
        lambda: core.create_namespaced_resource_quota(
            "kube-system", {"metadata": {"name": "kgwe-budget"}, **quota}
        ),
        "only the ResourceQuota kgwe-budget",
    )
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "kgwe-budget"}, **quota})
    core.patch_namespaced_resource_quota(
        "kgwe-budget", namespace, {"spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}
    )
    core.delete_namespaced_resource_quota("kgwe-budget", namespace)


@pytest.fixture
def running_controller(k8s_api, policy_crds) -> Iterator[tuple[WorkloadController, str]]:
    """The GPUWorkload controller (cluster-admin credentials: the refusals below are its own), with a policy
    namespace of its own and a one-second resync."""
    policy_namespace = f"kgwe-{secrets.token_hex(3)}"
    ensure_namespace(k8s_api, policy_namespace)
    reconciler = WorkloadReconciler(
        k8s_api,
        recorder=EventRecorder(k8s_api),
        metrics=WorkloadMetrics(CollectorRegistry()),
        is_leader=lambda: True,
        policy_namespace=policy_namespace,
    )
    controller = WorkloadController(reconciler, resync_seconds=1, watch_timeout_seconds=5)
    stop = threading.Event()
    controller.start(stop)
    yield controller, policy_namespace
    stop.set()
    delete_namespace(client.CoreV1Api(k8s_api), policy_namespace)


def _condition(k8s_api, namespace: str, name: str) -> dict:
    wl = client.CustomObjectsApi(k8s_api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == "Admitted"), {})


def _events(k8s_api, namespace: str, reason: str) -> list:
    return [e for e in client.CoreV1Api(k8s_api).list_namespaced_event(namespace).items if e.reason == reason]


def _jobs(k8s_api, namespace: str) -> list:
    return client.BatchV1Api(k8s_api).list_namespaced_job(namespace).items


def test_the_controller_refuses_a_template_escape_once_until_a_policy_allows_it(
    k8s_api, namespace, running_controller
):
    controller, policy_namespace = running_controller
    _opt_in(k8s_api, namespace)
    custom = client.CustomObjectsApi(k8s_api)
    body = _workload("escape", container={"securityContext": {"privileged": True}}, hostPID=True)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    refused = eventually(
        lambda: (c := _condition(k8s_api, namespace, "escape")).get("reason") == "TemplateNotAllowed" and c,
        "the refusal",
    )
    assert refused["status"] == "False"
    assert refused["message"].startswith(
        "spec.podTemplate.spec.hostPID: the node's process namespace: refused unless a PodTemplatePolicy "
        "allows it (spec.hostPID); spec.podTemplate.spec.containers[0].securityContext.privileged: "
    )
    version = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "escape")["metadata"][
        "resourceVersion"
    ]
    looks = controller.reconciles
    eventually(lambda: controller.reconciles >= looks + 3, "three more looks (the one-second resync)")
    after = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "escape")
    assert after["metadata"]["resourceVersion"] == version  # nothing rewritten: refused once
    events = _events(k8s_api, namespace, "TemplateNotAllowed")
    assert len(events) == 1 and (events[0].count or 1) == 1
    assert _jobs(k8s_api, namespace) == []
    # a platform team allows both for this namespace (the ConfigMap the policy reconcile renders from Git)
    allowed = json.dumps(
        [{"name": "privileged-ok", "spec": {"namespaces": [namespace], "privileged": True, "hostPID": True}}]
    )
    client.CoreV1Api(k8s_api).create_namespaced_config_map(
        policy_namespace,
        {"metadata": {"name": POD_TEMPLATE_POLICY_CONFIGMAP}, "data": {POD_TEMPLATE_POLICY_KEY: allowed}},
    )
    eventually(lambda: _condition(k8s_api, namespace, "escape")["status"] == "True", "admitted once allowed")
    (job,) = _jobs(k8s_api, namespace)
    pod = job.spec.template.spec
    assert pod.host_pid and pod.containers[0].security_context.privileged


def test_a_namespace_that_has_not_opted_in_gets_a_condition_then_runs_once_it_does(
    k8s_api, namespace, running_controller
):
    custom = client.CustomObjectsApi(k8s_api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _workload("waiting"))
    refused = eventually(
        lambda: (c := _condition(k8s_api, namespace, "waiting")).get("reason") == "NamespaceNotEnabled" and c,
        "the refusal",
    )
    assert f"labels it {WORKLOADS_NAMESPACE_LABEL}=enabled" in refused["message"]
    assert _jobs(k8s_api, namespace) == []
    _opt_in(k8s_api, namespace)
    eventually(lambda: _jobs(k8s_api, namespace), "the run's Job once the namespace opted in")
    assert len(_events(k8s_api, namespace, "NamespaceNotEnabled")) == 1


def test_an_edit_the_policy_refuses_is_not_applied_until_a_policy_allows_it(
    k8s_api, namespace, running_controller
):
    _, policy_namespace = running_controller
    _opt_in(k8s_api, namespace)
    custom, apps = client.CustomObjectsApi(k8s_api), client.AppsV1Api(k8s_api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _workload("serve", "Inference"))
    eventually(lambda: apps.read_namespaced_deployment("serve-worker", namespace), "the Deployment", 60)
    edit = {"spec": {"podTemplate": {"spec": {"hostNetwork": True}}}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "serve", edit)
    refused = eventually(
        lambda: (c := _condition(k8s_api, namespace, "serve")).get("reason") == "TemplateNotAllowed" and c,
        "the edit refused",
        60,
    )
    assert refused["message"].startswith("spec.podTemplate.spec.hostNetwork: the node's network namespace")
    assert not apps.read_namespaced_deployment("serve-worker", namespace).spec.template.spec.host_network
    allowed = json.dumps([{"name": "host-network", "spec": {"namespaces": [namespace], "hostNetwork": True}}])
    client.CoreV1Api(k8s_api).create_namespaced_config_map(
        policy_namespace,
        {"metadata": {"name": POD_TEMPLATE_POLICY_CONFIGMAP}, "data": {POD_TEMPLATE_POLICY_KEY: allowed}},
    )
    eventually(
        lambda: apps.read_namespaced_deployment("serve-worker", namespace).spec.template.spec.host_network,
        "the edit applied once allowed",
        60,
    )
    eventually(lambda: _condition(k8s_api, namespace, "serve")["status"] == "True", "admitted again")
