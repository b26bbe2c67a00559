"""GPUWorkloads through a real Kueue (v0.17.0, built from the Go module proxy; tests/harness/kueue.py) on a
control plane of this module's own that also serves native PodGroups: KGWE's scheduler and extender place
the pods, the GPUWorkload reconciler runs as in the controller.

Checked: under Kueue's configuration as shipped, a gang of two roles is ONE Kueue Workload admitted whole —
while Kueue's ClusterQueue has no room for all of it, none of its pods is scheduled, and the GPUWorkload
says why in Kueue's words; under manageJobsWithoutQueueName: true every batch workload (Auto, even with
native PodGroups served; one pod too) goes through Kueue the same way, with no Job for Kueue to suspend or
split, and gang.backend Native is refused saying why; what Kueue is configured to manage is read from its
ConfigMap (frameworks, namespace selector, LocalQueues) and said when it would not admit the pods; and the
GPUs are counted by one budget (KUEUE_REFUSALS: the refusal reasons only a running Kueue shows, found by
`kgwe validate --cluster` first, as tests/workloads/test_refusals.py does for the others)."""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from kubernetes import client

from kgwe.cli import main
from kgwe.cluster.client import ensure_namespace
from kgwe.localcluster import gpunodes
from kgwe.localcluster.heldpods import finish_held_pod
from tests.harness import kueue as kueue_harness
from tests.harness.pytest_cluster import delete_namespace
from tests.workloads.conftest import as_controller
from tests.workloads.test_workloads_cluster import (
    _DUMP,
    EXAMPLES,
    _cond,
    _create,
    _dump,
    _get,
    _pods,
    eventually,
    kgwe_stack,
    opt_in,
)

pytestmark = pytest.mark.cluster

# Refusal reasons whose case needs Kueue's API on the cluster (counted by test_refusals' completeness check).
KUEUE_REFUSALS = ("BudgetCountedTwice",)
HOLD = {"kgwe.nvidia.io/test-hold": "true"}  # the simulated kubelet keeps the pods running


@pytest.fixture(scope="module")
def kueue_cluster(
    new_control_plane: Callable[..., Any], kueue_tool: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, Any]]:
    with new_control_plane(
        feature_gates={"GenericWorkload": True}, apiserver_args=kueue_tool.CONTROL_PLANE_ARGS
    ) as cp:
        api = cp.api_client()
        nodes = [f"kueue-gpu-{i}" for i in range(3)]
        for name in nodes:
            gpunodes.create_gpu_node(api, name, "DGX-H100")
        gpunodes.wait_nodes_ready(api, nodes, timeout_seconds=120)
        kueue = kueue_tool.Kueue(cp, tmp_path_factory.mktemp("kueue"))
        try:
            yield cp, kueue
        finally:
            kueue.stop()


@pytest.fixture
def stack(kueue_cluster: tuple[Any, Any], tmp_path: Path) -> Iterator[dict[str, Any]]:
    """KGWE's scheduler, extender and GPUWorkload reconciler — as the controller's ServiceAccount with only
    deploy/'s RBAC, so the Kueue route needs no more than the chart grants; a fresh opted-in namespace."""
    cp, kueue = kueue_cluster
    api = cp.api_client()
    controller = as_controller(api)  # its Roles are in kgwe-system: the policy's ConfigMaps go there
    namespace, policy_namespace = f"kueue-{secrets.token_hex(3)}", "kgwe-system"
    ensure_namespace(api, namespace)
    opt_in(api, namespace)
    try:
        with kgwe_stack(cp, api, policy_namespace, tmp_path, reconciler_api=controller) as parts:
            _DUMP[:] = [lambda: _dump(api, namespace) + "\n" + _kueue_dump(api, namespace)]
            yield {
                **parts,
                "api": api,
                "kueue": kueue,
                "namespace": namespace,
                "policy_namespace": policy_namespace,
            }
    finally:
        # the kubelet's part in deleting the namespace: its running pods end (Kueue, whose finalizer they
        # carry, lets them go once they did; the simulated kubelet would keep them running)
        for pod in client.CoreV1Api(api).list_namespaced_pod(namespace).items:
            if pod.spec.node_name and pod.status.phase in ("Pending", "Running"):
                finish_held_pod(api, pod, ok=False)
        delete_namespace(client.CoreV1Api(api), namespace)


def _kueue_workloads(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return list(
        client.CustomObjectsApi(api).list_namespaced_custom_object(
            *kueue_harness.API, namespace, "workloads"
        )["items"]
    )


def _kueue_dump(api: client.ApiClient, namespace: str) -> str:
    return "\n".join(
        f"kueue workload {w['metadata']['name']}: {w.get('status')}" for w in _kueue_workloads(api, namespace)
    )


def _gang(name: str, *, launcher_gpus: int, workers: int, worker_gpus: int, **gang: Any) -> dict[str, Any]:
    """A launcher and `workers` workers: one gang across two roles (HOLD: they keep running)."""
    doc = yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text())
    doc["metadata"] = {"name": name}
    doc["spec"].pop("distributedConfig", None)
    doc["spec"]["gpuRequirements"] = {"count": worker_gpus}
    doc["spec"]["roles"] = [
        {"name": "launcher", "replicas": 1, "gpuRequirements": {"count": launcher_gpus}},
        {"name": "worker", "replicas": workers},
    ]
    doc["spec"]["gang"] = dict(gang)
    doc["spec"]["podTemplate"]["metadata"] = {"annotations": dict(HOLD)}
    return doc


def _scheduled(api: client.ApiClient, namespace: str, name: str) -> list[Any]:
    return [p for p in _pods(api, namespace, name) if p.spec.node_name]


def _gated(api: client.ApiClient, namespace: str, name: str) -> list[Any]:
    return [p for p in _pods(api, namespace, name) if p.spec.scheduling_gates]


def _jobs(api: client.ApiClient, namespace: str) -> list[Any]:
    return client.BatchV1Api(api).list_namespaced_job(namespace).items


def test_a_gang_of_two_roles_is_admitted_whole_under_kueues_shipped_configuration(stack):
    api, ns, kueue = stack["api"], stack["namespace"], stack["kueue"]
    kueue.configure()  # Kueue's configuration as its manifests ship it (manageJobsWithoutQueueName false)
    kueue_harness.queues(api, ns, cluster_queue=f"gpus-{ns}", local_queues=["team-a"], gpus=16)
    first = _create(
        api,
        ns,
        _gang("first", launcher_gpus=4, workers=2, worker_gpus=4, backend="Kueue", queueName="team-a"),
        {},
    )
    wl = eventually(
        lambda: (w := _get(api, ns, first)) and _cond(w, "PodsScheduled").get("status") == "True" and w,
        "the first gang admitted by Kueue and scheduled",
        timeout=180,
    )
    assert wl["status"]["gangBackend"] == "Kueue"
    assert _cond(wl, "KueueAdmitted")["status"] == "True"
    assert f"ClusterQueue gpus-{ns}" in _cond(wl, "KueueAdmitted")["message"]
    (workload,) = _kueue_workloads(api, ns)
    assert workload["metadata"]["name"] == "first-r0"  # one Kueue Workload for the whole gang ...
    assert sum(ps["count"] for ps in workload["spec"]["podSets"]) == 3  # ... of both roles' pods
    assert not _jobs(api, ns)  # no Job Kueue could admit (or suspend) on its own
    pods = _pods(api, ns, first)
    assert len(pods) == 3 and all(p.metadata.labels.get("kueue.x-k8s.io/managed") == "true" for p in pods)
    assert all(p.spec.scheduler_name == "kgwe-scheduler" for p in pods)

    # 12 of 16 GPUs taken: a second gang of 12 is held whole, and the GPUWorkload says why in Kueue's words
    second = _create(
        api,
        ns,
        _gang("second", launcher_gpus=4, workers=2, worker_gpus=4, backend="Kueue", queueName="team-a"),
        {},
    )
    wl = eventually(
        lambda: (
            (w := _get(api, ns, second))
            and "insufficient unused quota" in _cond(w, "KueueAdmitted").get("message", "")
            and "insufficient unused quota" in _cond(w, "PodsScheduled").get("message", "")
            and len(_gated(api, ns, second)) == 3
            and w
        ),
        "the second gang held by Kueue, in Kueue's words",
        timeout=120,
    )
    held = _cond(wl, "KueueAdmitted")["message"]
    assert held.startswith("Kueue holds Workload second-r0 (team-a): couldn't assign flavors")
    assert _cond(wl, "KueueAdmitted")["status"] == "False"
    assert _cond(wl, "PodsScheduled")["reason"] == "Queued" and held in _cond(wl, "PodsScheduled")["message"]
    assert not _scheduled(api, ns, second)  # none of them: the gang is whole or not at all
    events = (
        client.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"involvedObject.name={second}").items
    )
    assert any(e.reason.startswith("Kueue") and e.type == "Warning" for e in events)

    # the first gang completes (the test plays the kubelet): the GPUWorkload succeeds, Kueue finishes its
    # Workload and frees the quota, and the second gang is admitted, all three pods at once
    for pod in _pods(api, ns, first):
        finish_held_pod(api, pod, ok=True)
    wl = eventually(
        lambda: (w := _get(api, ns, first)) and w["status"].get("phase") == "Succeeded" and w,
        "the first gang complete",
    )
    assert _cond(wl, "Complete")["reason"] == "Completed"
    eventually(
        lambda: (w := _get(api, ns, second)) and _cond(w, "PodsScheduled").get("status") == "True",
        "the second gang admitted once the first is done",
        timeout=180,
    )
    assert len(_scheduled(api, ns, second)) == 3 and not _gated(api, ns, second)


def test_where_kueue_manages_every_job_each_batch_workload_is_one_kueue_pod_group(stack):
    api, ns, kueue = stack["api"], stack["namespace"], stack["kueue"]
    kueue.configure(manageJobsWithoutQueueName=True)
    kueue_harness.queues(api, ns, cluster_queue=f"all-{ns}", local_queues=["default"], gpus=24)
    # gang.backend Auto with native PodGroups served: the Jobs would each become a Kueue Workload, so Kueue
    gang = _create(api, ns, _gang("gang", launcher_gpus=8, workers=1, worker_gpus=8), {})
    single = copy.deepcopy(yaml.safe_load((EXAMPLES / "kgwe-readme-llm-training.yaml").read_text()))
    single["metadata"] = {"name": "single"}
    single["spec"]["podTemplate"]["metadata"] = {"annotations": dict(HOLD)}
    one = _create(api, ns, single, {})
    for name, pods in ((gang, 2), (one, 1)):
        wl = eventually(
            lambda name=name: (
                (w := _get(api, ns, name)) and _cond(w, "PodsScheduled").get("status") == "True" and w
            ),
            f"{name} admitted by Kueue and scheduled",
            timeout=180,
        )
        assert wl["status"]["gangBackend"] == "Kueue", wl["status"]
        assert len(_scheduled(api, ns, name)) == pods
    names = sorted(w["metadata"]["name"] for w in _kueue_workloads(api, ns))
    assert names == ["gang-r0", "single-r0"]  # one per workload, none per Job
    assert not _jobs(api, ns)
    assert not client.CustomObjectsApi(api).list_namespaced_custom_object(
        "scheduling.k8s.io", "v1beta1", ns, "podgroups"
    )["items"]

    native = _create(
        api, ns, _gang("native", launcher_gpus=1, workers=1, worker_gpus=1, backend="Native"), {}
    )
    wl = eventually(
        lambda: (w := _get(api, ns, native)) and _cond(w, "Admitted").get("status") == "False" and w,
        "gang.backend Native refused",
    )
    admitted = _cond(wl, "Admitted")
    assert admitted["reason"] == "NoGangEngine"
    assert (
        "manageJobsWithoutQueueName: true" in admitted["message"]
        and "admitted on its own" in admitted["message"]
    )
    assert not _pods(api, ns, native)


def _validate_cluster(cp: Any, policy_namespace: str, manifest: Path, capsys: Any) -> tuple[int, list[str]]:
    code = main(
        [
            "validate",
            "--cluster",
            "--kubeconfig",
            str(cp.kubeconfig_path),
            "--policy-namespace",
            policy_namespace,
            str(manifest),
        ]
    )
    return code, capsys.readouterr().out.splitlines()


def test_what_kueue_is_configured_to_manage_is_read_and_said(stack, kueue_cluster, tmp_path, capsys):
    """Kueue served, but configured so it would not admit KGWE's pods: refused before anything is made, by
    `kgwe validate --cluster` and by the controller, naming the setting and where it was read."""
    api, ns, kueue = stack["api"], stack["namespace"], stack["kueue"]
    cp = kueue_cluster[0]
    kueue.configure()  # queues are made (and go Active) under the shipped configuration, whatever ran before
    kueue_harness.queues(api, ns, cluster_queue=f"q-{ns}", local_queues=["team-a"], gpus=8)
    cases = [
        ({"integrations": {"frameworks": ["batch/job"]}}, 'integrations.frameworks lacks "pod"'),
        (
            {"managedJobsNamespaceSelector": {"matchLabels": {"kueue": "on"}}},
            "outside Kueue's managedJobsNamespaceSelector",
        ),
    ]
    for i, (changes, said) in enumerate(cases):
        kueue.configure(**changes)
        doc = _gang(
            f"conf{i}", launcher_gpus=1, workers=1, worker_gpus=1, backend="Kueue", queueName="team-a"
        )
        doc["metadata"]["namespace"] = ns
        manifest = tmp_path / f"conf{i}.yaml"
        manifest.write_text(yaml.safe_dump(doc))
        code, lines = _validate_cluster(cp, stack["policy_namespace"], manifest, capsys)
        assert code == 1 and any(said in line and line.endswith("[NoGangEngine]") for line in lines), lines
        assert any("read from ConfigMap kueue-system/kueue-manager-config" in line for line in lines), lines
        name = _create(api, ns, doc, {})
        wl = eventually(
            lambda name=name: (
                (w := _get(api, ns, name)) and _cond(w, "Admitted").get("status") == "False" and w
            ),
            f"{name} refused",
        )
        assert _cond(wl, "Admitted")["reason"] == "NoGangEngine" and said in _cond(wl, "Admitted")["message"]
        assert not _pods(api, ns, name)


def test_the_gpus_kueue_admits_are_counted_by_one_budget(stack, kueue_cluster, tmp_path, capsys):
    """BudgetCountedTwice: found by `kgwe validate --cluster`, then refused by the controller."""
    api, ns, kueue = stack["api"], stack["namespace"], stack["kueue"]
    cp = kueue_cluster[0]
    kueue.configure()
    kueue_harness.queues(api, ns, cluster_queue=f"b-{ns}", local_queues=["team-a"], gpus=8)
    quota = {
        "metadata": {"name": "kgwe-budget", "annotations": {"kgwe.nvidia.io/budget": "ml-research"}},
        "spec": {"hard": {"requests.nvidia.com/gpu": "64"}},
    }
    client.CoreV1Api(api).create_namespaced_resource_quota(ns, quota)
    doc = _gang("twice", launcher_gpus=1, workers=1, worker_gpus=1, backend="Kueue", queueName="team-a")
    doc["metadata"]["namespace"] = ns
    manifest = tmp_path / "twice.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    code, lines = _validate_cluster(cp, stack["policy_namespace"], manifest, capsys)
    assert code == 1 and any(line.endswith("[BudgetCountedTwice]") for line in lines), lines
    name = _create(api, ns, doc, {})
    wl = eventually(
        lambda: (w := _get(api, ns, name)) and _cond(w, "Admitted").get("status") == "False" and w,
        "refused: one budget counts the GPUs",
    )
    admitted = _cond(wl, "Admitted")
    assert admitted["reason"] == "BudgetCountedTwice" and "GPUBudget ml-research" in admitted["message"]
    assert not _pods(api, ns, name)
