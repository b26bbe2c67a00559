"""Every reason the controller refuses a GPUWorkload is found by `kgwe validate` first.

The reasons are enumerated from the code (kgwe/workloads: PlanError, Finding, the reconciler's refusals and
the quota check) and must all be in admission.REFUSALS; each has a case below. For each case the real
reconciler, on a real API server, refuses the workload with that reason, and `kgwe validate` reported it
before: offline as an error when it depends on the manifest or the policy repository (a warning where only
the cluster can tell, nothing where nothing offline foretells it), and with `--cluster` as an error (a
warning for the state of the moment: a budget used up, the controller's RoleBinding not in place yet)."""

from __future__ import annotations

import ast
import copy
import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from prometheus_client import CollectorRegistry

from kgwe.cli import main
from kgwe.cluster.client import ensure_namespace
from kgwe.cluster.events import EventRecorder
from kgwe.policy import load_repository
from kgwe.policy.admission import REFUSALS, ClusterView, Finding, PolicyView, findings, refusal
from kgwe.policy.gpu_workload import GPUWorkload
from kgwe.render.render import RenderOptions, render
from kgwe.resources import sample_repo_dir
from kgwe.vocab import API_GROUP as GROUP
from kgwe.vocab import CRD_VERSION as VERSION
from kgwe.vocab import GPU_WORKLOAD_PLURAL as PLURAL
from kgwe.vocab import WORKLOAD_ROLEBINDING, WORKLOADS_ENABLED, WORKLOADS_NAMESPACE_LABEL
from kgwe.workloads.controller import WorkloadMetrics, WorkloadReconciler
from tests.harness.crds import install_crds
from tests.harness.pytest_cluster import delete_namespace

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "gpuworkloads"
OWN = yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text())  # brings its template
BARE = yaml.safe_load((EXAMPLES / "kgwe-prd-llm-training-job.yaml").read_text())  # takes a runtime

POLICY = """
apiVersion: kgwe.nvidia.io/v1
kind: ScoringProfile
metadata: {name: default}
spec: {default: true, strategy: BestFit}
---
apiVersion: kgwe.nvidia.io/v1
kind: GPUBudget
metadata: {name: small}
spec: {team: small, namespaces: [NS_QUOTA], limit: {amount: "100"}, quota: {nvidia.com/gpu: 4}}
---
apiVersion: kgwe.nvidia.io/v1
kind: GPUBudget
metadata: {name: spent}
spec: {team: spent, namespaces: [NS_SPENT], limit: {amount: "100"}, quota: {nvidia.com/gpu: 16}}
---
apiVersion: kgwe.nvidia.io/v1
kind: PodTemplatePolicy
metadata: {name: ml-training}
spec: {namespaces: [ml-training], capabilities: [IPC_LOCK]}
"""
RDMA_RUNTIME = Path(__file__).parent / "fixtures" / "deepspeed-rdma-runtime.yaml"  # ml-training allows it


def _case(base: dict, **spec) -> dict:
    doc = copy.deepcopy(base)
    doc["spec"].update(spec)
    return doc


# reason -> (the workload, the namespace it goes to: "" = the test's, or one of NAMESPACES)
CASES: dict[str, tuple[dict, str]] = {
    # the CRD takes any podTemplate (it preserves unknown fields); the model does not
    "InvalidSpec": (
        _case(OWN, podTemplate={"spec": {"affinity": "x", "containers": [{"name": "t", "image": "b"}]}}),
        "",
    ),
    "NameTooLong": ({**copy.deepcopy(OWN), "metadata": {"name": "w" * 58}}, ""),
    "NoRuntime": (_case(BARE, framework="TensorFlow"), ""),
    # the runtime's container is "trainer": an init container of that name is refused by the API server
    "InvalidPodTemplate": (
        _case(BARE, podTemplate={"spec": {"initContainers": [{"name": "trainer", "image": "b"}]}}),
        "",
    ),
    "NoScoringProfile": (_case(OWN, schedulingStrategy="LeastLoaded"), ""),
    "QuotaExceeded": (copy.deepcopy(OWN), "quota"),
    "Unschedulable": (_case(OWN, gpuRequirements={"count": 8, "product": "T4"}), ""),
    "NoGangEngine": (_case(OWN, distributedConfig={"nodes": 2}, gang={"backend": "Kueue"}), ""),
    "NoPriorityClass": (_case(OWN, priority="high"), ""),
    "BudgetExhausted": (copy.deepcopy(OWN), "spent"),
    # judged as the pods get it: the runtime's template (IPC_LOCK) with the workload's laid over it
    "TemplateNotAllowed": (_case(BARE, framework="DeepSpeed"), ""),
    "NamespaceNotEnabled": (copy.deepcopy(OWN), "closed"),
    # opted in, but the controller's RoleBinding there is gone (or not written yet)
    "Forbidden": (copy.deepcopy(OWN), "unbound"),
    # a Service of the workload's name exists already (TAKEN, made below): never taken over
    "ChildNameTaken": ({**copy.deepcopy(OWN), "metadata": {"name": "taken"}}, ""),
}
TAKEN = {
    "metadata": {"name": "taken"},
    "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"name": "pg", "port": 5432}]},
}
# suffix -> opted in to GPUWorkloads (the test's own namespace is; "kgwe" is KGWE's, where the policy is)
NAMESPACES = {"quota": True, "spent": True, "closed": False, "unbound": True, "kgwe": False}


def _reasons_in_code() -> set[str]:
    """The reason strings the workload code refuses with."""
    found: set[str] = set()
    policy = ROOT / "kgwe" / "policy"
    admission = [policy / "admission.py", policy / "workload_resolution.py", policy / "template_admission.py"]
    for path in [*(ROOT / "kgwe" / "workloads").glob("*.py"), *admission]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                args = node.args[1:] if name == "_refuse" else node.args
                if name in ("PlanError", "Finding", "_refuse") and args and isinstance(args[0], ast.Constant):
                    found.add(args[0].value)
            if isinstance(node, ast.FunctionDef) and node.name == "quota_admission":
                found |= {
                    c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in REFUSALS
                }
    return found - {""}  # "" : a finding that is the API server's refusal, not the controller's


def test_every_refusal_in_the_code_is_listed_and_has_a_case():
    """The cases here, and those only a running Kueue can show (tests/workloads/test_kueue_cluster.py)."""
    from tests.workloads.test_kueue_cluster import KUEUE_REFUSALS

    in_code = _reasons_in_code()
    assert in_code <= set(REFUSALS), in_code - set(REFUSALS)
    assert set(REFUSALS) == set(CASES) | set(KUEUE_REFUSALS)
    assert {"BudgetExhausted", "QuotaExceeded", "NoRuntime", "InvalidSpec", "NameTooLong"} <= in_code
    assert {"TemplateNotAllowed", "NamespaceNotEnabled", "Forbidden"} <= in_code


def test_where_a_workload_may_run_is_known_offline_only_for_kubernetes_and_kgwe_namespaces():
    wl = GPUWorkload.model_validate(OWN)

    def said(namespace: str, cluster: ClusterView) -> list[tuple[str, str]]:
        found = findings(wl, namespace, PolicyView(), cluster)
        return [(f.reason, f.severity) for f in found if f.reason in ("NamespaceNotEnabled", "Forbidden")]

    offline = ClusterView()
    assert said("kube-system", offline) == [("NamespaceNotEnabled", "error")]
    assert said("kgwe-system", offline) == [("NamespaceNotEnabled", "error")]
    assert said("ml-team", offline) == []  # its label is on the cluster only
    assert said("kgwe", ClusterView(kgwe_namespace="kgwe")) == [("NamespaceNotEnabled", "error")]
    online = ClusterView(enabled_namespaces={"ml-team", "nlp"}, bound_namespaces={"ml-team"})
    assert said("ml-team", online) == []
    assert said("vision", online) == [("NamespaceNotEnabled", "error")]
    assert said("nlp", online) == [("Forbidden", "warning")]  # admission waits for the RoleBinding


def test_the_refusal_names_its_reasons_first_fields():
    found = [
        Finding("TemplateNotAllowed", ("spec", "podTemplate", "spec", f"f{i}"), f"m{i}") for i in range(5)
    ]
    later = Finding("Unschedulable", ("spec", "gpuRequirements"), "too big")
    warned = Finding("NoPriorityClass", ("spec", "priority"), "unknown", "warning")
    assert refusal([warned]) is None
    assert refusal([warned, *found[:2], later]) == (
        "TemplateNotAllowed",
        "spec.podTemplate.spec.f0: m0; spec.podTemplate.spec.f1: m1",
    )
    reason, message = refusal([*found, later]) or ("", "")
    assert reason == "TemplateNotAllowed" and message.endswith("spec.podTemplate.spec.f2: m2 (and 2 more)")


def _validate(capsys, args: list[str]) -> tuple[int, list[str]]:
    code = main(["validate", *args])
    return code, capsys.readouterr().out.splitlines()


def _found(lines: list[str], reason: str, severity: str) -> bool:
    if reason == "InvalidSpec":  # the schema's own messages; the controller reports the first of them
        return any(
            f": {severity}: " in line and "spec.podTemplate.spec.affinity: expected" in line for line in lines
        )
    return any(f": {severity}: " in line and line.endswith(f"[{reason}]") for line in lines)


def _reconciler(api: client.ApiClient, policy_namespace: str, stop: threading.Event) -> WorkloadReconciler:
    """The reconciler with its namespace watch running (it decides nothing before the first listing)."""
    reconciler = WorkloadReconciler(
        api,
        recorder=EventRecorder(api),
        metrics=WorkloadMetrics(CollectorRegistry()),
        is_leader=lambda: True,
        policy_namespace=policy_namespace,
    )
    threading.Thread(target=reconciler.grants.run, args=(stop, 5), daemon=True).start()
    assert reconciler.grants.listed.wait(30)
    return reconciler


@pytest.mark.cluster
def test_each_refusal_is_found_by_validate_before_the_controller_refuses_it(
    k8s_api, control_plane, namespace, gpu_node, controller_account, tmp_path, capsys
):
    install_crds(k8s_api)
    core, custom = client.CoreV1Api(k8s_api), client.CustomObjectsApi(k8s_api)
    namespaces = {"": namespace, **{key: f"{namespace}-{key}" for key in NAMESPACES}}
    for key, ns in namespaces.items():
        ensure_namespace(k8s_api, ns)
        if NAMESPACES.get(key, True):
            core.patch_namespace(ns, {"metadata": {"labels": {WORKLOADS_NAMESPACE_LABEL: WORKLOADS_ENABLED}}})
    gpu_node("DGX-A100")
    repo = tmp_path / "repo"
    (repo / "runtimes").mkdir(parents=True)
    text = POLICY.replace("NS_QUOTA", namespaces["quota"]).replace("NS_SPENT", namespaces["spent"])
    (repo / "policy.yaml").write_text(text)
    for runtime in [*(sample_repo_dir() / "runtimes").glob("*.yaml"), RDMA_RUNTIME]:
        (repo / "runtimes" / runtime.name).write_text(runtime.read_text())
    ps = load_repository(repo)
    assert ps.ok, ps.errors
    # what the policy reconciler would apply: the rendered ConfigMaps, and the budgets' quotas
    kgwe_namespace = namespaces["kgwe"]
    rendered = render(ps, options=RenderOptions(namespace=kgwe_namespace))
    for obj in rendered.objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["namespace"] == kgwe_namespace:
            core.create_namespaced_config_map(kgwe_namespace, obj)
        if obj["kind"] == "ResourceQuota" and obj["metadata"]["namespace"] == namespaces["quota"]:
            core.create_namespaced_resource_quota(namespaces["quota"], obj)
    core.create_namespaced_service(namespace, TAKEN)  # say, a StatefulSet's headless Service
    capped = {"metadata": {"name": "kgwe-budget"}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}
    core.create_namespaced_resource_quota(namespaces["spent"], capped)  # an Enforce budget used up
    stop = threading.Event()
    reconciler = _reconciler(k8s_api, kgwe_namespace, stop)
    reconciler.grants.sync()  # the controller's RoleBindings in the opted-in namespaces, as its worker does
    client.RbacAuthorizationV1Api(k8s_api).delete_namespaced_role_binding(
        WORKLOAD_ROLEBINDING, namespaces["unbound"]
    )
    # with only the chart's rights, which a namespace's RoleBinding extends
    confined = _reconciler(controller_account, "kgwe-system", stop)
    cluster_args = [
        "--cluster",
        "--kubeconfig",
        str(control_plane.kubeconfig_path),
        "--policy-namespace",
        kgwe_namespace,
    ]
    try:
        for reason, (doc, where) in CASES.items():
            ns = namespaces[where]
            doc = copy.deepcopy(doc)
            doc["metadata"] = {**doc["metadata"], "namespace": ns}
            manifest = tmp_path / f"{reason}.yaml"
            manifest.write_text(yaml.safe_dump(doc, sort_keys=False))
            scope = REFUSALS[reason].scope
            code, offline = _validate(capsys, ["--policy", str(repo), str(manifest)])
            if scope in ("spec", "repository"):
                assert code == 1 and _found(offline, reason, "error"), (reason, offline)
            elif reason in (
                "Unschedulable",
                "NoPriorityClass",
            ):  # foreseen offline, known on the cluster only
                assert code == 0 and _found(offline, reason, "warning"), (reason, offline)
            else:  # nothing offline foretells it
                assert code == 0 and not any(line.endswith(f"[{reason}]") for line in offline), (
                    reason,
                    offline,
                )
            code, online = _validate(capsys, ["--policy", str(repo), *cluster_args, str(manifest)])
            severity = "warning" if scope == "state" else "error"
            assert _found(online, reason, severity), (reason, online)
            assert code == (0 if scope == "state" else 1), (reason, online)
            # now the controller: the same workload on the cluster, one reconcile
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, doc)
            (confined if reason == "Forbidden" else reconciler).reconcile(ns, doc["metadata"]["name"])
            wl = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, doc["metadata"]["name"])
            admitted = next(c for c in wl["status"]["conditions"] if c["type"] == "Admitted")
            assert (admitted["status"], admitted["reason"]) == ("False", reason), (reason, admitted)
            assert not client.BatchV1Api(k8s_api).list_namespaced_job(ns).items
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, doc["metadata"]["name"])
        victim = core.read_namespaced_service("taken", namespace)
        assert victim.spec.selector == {"app": "db"} and not victim.metadata.owner_references
        # not a controller refusal but the API server's: --cluster says it too
        ghost = {**copy.deepcopy(OWN), "metadata": {"name": "ghost", "namespace": f"{namespace}-none"}}
        (tmp_path / "ghost.yaml").write_text(yaml.safe_dump(ghost))
        code, online = _validate(capsys, ["--policy", str(repo), *cluster_args, str(tmp_path / "ghost.yaml")])
        assert code == 1 and any(f'namespace "{namespace}-none" does not exist' in line for line in online)
    finally:
        stop.set()
        for key in NAMESPACES:
            delete_namespace(core, namespaces[key])
