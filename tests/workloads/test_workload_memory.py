"""The GPUWorkload reconciler's steps on the in-memory cluster (kgwe.runtime.memory): admission and status
transitions as the run's pods and Jobs move, a member failure restarting the gang after its backoff,
refusals (those only an edit lifts, those retried after the workload's backoff), leader loss, and the
controller's loop. The test plays the kubelet and the Job controller (their status writes); the real control
plane proves the same wiring end to end (test_workloads_cluster.py, test_refusals.py)."""

from __future__ import annotations

import contextlib
import copy
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from kgwe.cluster.events import EventRecorder
from kgwe.localcluster.gpunodes import machine, node_manifest
from kgwe.policy import GPUWorkload, load_repository
from kgwe.policy.workload_resolution import kueue_pod_names, podgroup_name
from kgwe.render.render import RenderOptions, render
from kgwe.resources import sample_repo_dir
from kgwe.runtime.conditions import find
from kgwe.runtime.kinds import (
    EVENT,
    GPU_WORKLOAD,
    JOB,
    KUEUE_WORKLOAD,
    LOCAL_QUEUE,
    NODE,
    POD,
    RESOURCE_QUOTA,
    SERVICE,
)
from kgwe.runtime.loop import DONE, RETRY
from kgwe.runtime.memory import SERVED, MemoryCluster
from kgwe.runtime.queue import Backoff
from kgwe.vocab import (
    BUDGET_QUOTA_NAME,
    GPU_PODS_ANNOTATION,
    KUEUE_API_VERSION,
    KUEUE_CONFIG_KEY,
    KUEUE_CONFIGMAP,
    KUEUE_DEFAULT_LOCAL_QUEUE,
    KUEUE_NAMESPACE,
    RUN_LABEL,
    WORKLOAD_LABEL,
    WORKLOADS_ENABLED,
    WORKLOADS_NAMESPACE_LABEL,
)
from kgwe.workloads.controller import BACKOFF, WorkloadController, WorkloadMetrics, WorkloadReconciler
from tests.harness.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
OWN = yaml.safe_load(
    (ROOT / "docs" / "examples" / "gpuworkloads" / "kgwe-readme-llm-training.yaml").read_text()
)
KGWE_NS, TEAM_NS, CLOSED_NS = "kgwe-system", "ml-team", "closed"
SCORING = """apiVersion: kgwe.nvidia.io/v1
kind: ScoringProfile
metadata: {name: default}
spec: {default: true, strategy: BestFit}
"""
T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class Leader:
    def __init__(self) -> None:
        self.leading = True

    def __call__(self) -> bool:
        return self.leading


def namespace(name: str, enabled: bool) -> dict[str, Any]:
    labels = {WORKLOADS_NAMESPACE_LABEL: WORKLOADS_ENABLED} if enabled else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SimpleNamespace]:
    """The cluster as the policy reconciler leaves it (rendered ConfigMaps, GPU nodes, an opted-in
    namespace), and the workload reconciler with its namespace watch running."""
    with make_world(tmp_path, MemoryCluster()) as made:
        yield made


@pytest.fixture
def kueue_world(tmp_path: Path) -> Iterator[SimpleNamespace]:
    """The same where Kueue is installed and takes every Job (manageJobsWithoutQueueName), the team's
    namespace holding the LocalQueue `default`: every batch run goes through Kueue as one pod group."""
    cluster = MemoryCluster(served={*SERVED, LOCAL_QUEUE, KUEUE_WORKLOAD})
    config = (
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nmanageJobsWithoutQueueName: true\n"
    )
    cluster.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": KUEUE_CONFIGMAP, "namespace": KUEUE_NAMESPACE},
            "data": {KUEUE_CONFIG_KEY: config + 'integrations: {frameworks: ["batch/job", "pod"]}\n'},
        }
    )
    queue = {"apiVersion": KUEUE_API_VERSION, "kind": "LocalQueue"}
    cluster.put({**queue, "metadata": {"name": KUEUE_DEFAULT_LOCAL_QUEUE, "namespace": TEAM_NS}})
    with make_world(tmp_path, cluster) as made:
        yield made


@contextlib.contextmanager
def make_world(tmp_path: Path, cluster: MemoryCluster) -> Iterator[SimpleNamespace]:
    (tmp_path / "scoring.yaml").write_text(SCORING)
    for runtime in (sample_repo_dir() / "runtimes").glob("*.yaml"):
        (tmp_path / runtime.name).write_text(runtime.read_text())
    for obj in render(load_repository(tmp_path), options=RenderOptions(namespace=KGWE_NS)).objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"].get("namespace") == KGWE_NS:
            cluster.put(obj)
    for i in range(2):
        cluster.put(node_manifest(f"h100-{i}", machine("DGX-H100")))
    cluster.put(namespace(TEAM_NS, True))
    cluster.put(namespace(CLOSED_NS, False))
    clock, leader, stop = Clock(), Leader(), threading.Event()
    rec = WorkloadReconciler(
        cluster,
        recorder=EventRecorder(cluster),
        metrics=WorkloadMetrics(CollectorRegistry()),
        is_leader=leader,
        policy_namespace=KGWE_NS,
        now=clock,
    )
    threading.Thread(target=rec.grants.run, args=(stop, 5), daemon=True).start()
    assert rec.grants.listed.wait(30)
    rec.grants.sync()  # the controller's RoleBindings, as its worker writes them before any workload

    def create(ns: str = TEAM_NS, name: str = "llm-training", **spec: Any) -> str:
        doc = copy.deepcopy(OWN)
        doc["metadata"] = {"name": name, "namespace": ns}
        doc["spec"].update(spec)
        cluster.create(doc)
        return str(doc["metadata"]["name"])

    def status(name: str, ns: str = TEAM_NS) -> dict[str, Any]:
        return (cluster.get(GPU_WORKLOAD, name, ns) or {}).get("status") or {}

    try:
        yield SimpleNamespace(
            cluster=cluster, rec=rec, clock=clock, leader=leader, stop=stop, create=create, status=status
        )
    finally:
        stop.set()


def cond(status: dict[str, Any], ctype: str) -> tuple[str, str]:
    found = find(status.get("conditions"), ctype) or {}
    return found.get("status", ""), found.get("reason", "")


def play_kubelet(cluster: MemoryCluster, name: str, run: int, *, ready: bool) -> None:
    """The run's one pod, bound to a node (and Running and Ready when `ready`), as the scheduler and the
    kubelet would leave it."""
    (job,) = cluster.list(JOB, TEAM_NS, labels=f"{WORKLOAD_LABEL}={name},{RUN_LABEL}={run}")
    template = job["spec"]["template"]
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]} if ready else {}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{job['metadata']['name']}-0", "namespace": TEAM_NS, **template["metadata"]},
        "spec": {**template["spec"], "nodeName": "h100-0"},
        "status": status,
    }
    cluster.put(pod)


def job_ends(cluster: MemoryCluster, name: str, run: int, how: str) -> None:
    """The Job controller's verdict on the run's Job: Complete or Failed."""
    (job,) = cluster.list(JOB, TEAM_NS, labels=f"{WORKLOAD_LABEL}={name},{RUN_LABEL}={run}")
    job["status"] = {"conditions": [{"type": how, "status": "True", "reason": "BackoffLimitExceeded"}]}
    cluster.put(job)


def test_a_workload_is_admitted_then_scheduled_running_and_succeeded(world):
    name = world.create()
    result = world.rec.reconcile(TEAM_NS, name)
    assert result.after_seconds is not None and not result.failed
    status = world.status(name)
    assert cond(status, "Admitted") == ("True", "Admitted") and status["phase"] == "Pending"
    assert status["run"] == 0 and status["gangBackend"] and status["gpus"] == 8
    assert len(world.cluster.list(JOB, TEAM_NS)) == 1  # one pod: no PodGroup
    managed = world.cluster.get(GPU_WORKLOAD, name, TEAM_NS)["metadata"]["managedFields"]
    assert {"manager": "kgwe-controller", "operation": "Update", "subresource": "status"} in managed

    play_kubelet(world.cluster, name, 0, ready=False)
    world.rec.reconcile(TEAM_NS, name)
    status = world.status(name)
    assert cond(status, "PodsScheduled") == ("True", "AllScheduled") and status["phase"] == "Scheduled"
    assert status["nodes"] == "h100-0" and status["placements"][0]["node"] == "h100-0"

    assert status["placements"][0]["gpus"] == []  # the agent has not read the kubelet's allocation yet

    play_kubelet(world.cluster, name, 0, ready=True)
    node = world.cluster.get(NODE, "h100-0")
    pod_name = status["placements"][0]["pod"]
    holders = {str(i): f"{TEAM_NS}/{pod_name}" for i in range(8)} | {"7": "other/pod"}
    node["metadata"].setdefault("annotations", {})[GPU_PODS_ANNOTATION] = json.dumps(holders)
    world.cluster.put(node)
    world.rec.reconcile(TEAM_NS, name)
    assert cond(world.status(name), "PodsReady") == ("True", "AllReady")
    assert world.status(name)["phase"] == "Running"
    assert world.status(name)["placements"][0]["gpus"] == list(range(7))  # what the kubelet allocated it

    job_ends(world.cluster, name, 0, "Complete")
    assert world.rec.reconcile(TEAM_NS, name) == DONE  # nothing more to look at
    status = world.status(name)
    assert cond(status, "Complete") == ("True", "Completed") and status["phase"] == "Succeeded"
    reasons = [e["reason"] for e in world.cluster.objects(EVENT)]
    assert {"Created", "Admitted", "Scheduled", "Completed"} <= set(reasons)
    writes = len(world.cluster.writes)
    assert world.rec.reconcile(TEAM_NS, name) == DONE
    assert len(world.cluster.writes) == writes  # a look that changes nothing writes nothing


def test_a_member_failure_restarts_the_whole_gang_after_its_backoff_until_retries_run_out(world):
    name = world.create(retryPolicy={"maxRetries": 1, "backoffSeconds": 60, "jitter": 0})
    world.rec.reconcile(TEAM_NS, name)
    job_ends(world.cluster, name, 0, "Failed")
    result = world.rec.reconcile(TEAM_NS, name)
    assert result.after_seconds == 60.0  # the gang's own backoff, from its retryPolicy
    status = world.status(name)
    assert status["retryCount"] == 1 and status["nextRetryTime"] == "2026-11-01T12:01:00Z"
    assert cond(status, "PodsScheduled") == ("False", "Restarting")
    assert world.cluster.list(JOB, TEAM_NS) == []

    assert world.rec.reconcile(TEAM_NS, name).after_seconds == 60.0  # not yet: nothing recreated
    world.clock.now += timedelta(seconds=61)
    world.rec.reconcile(TEAM_NS, name)
    assert world.status(name)["run"] == 1
    assert [j["metadata"]["labels"][RUN_LABEL] for j in world.cluster.list(JOB, TEAM_NS)] == ["1"]

    job_ends(world.cluster, name, 1, "Failed")
    assert world.rec.reconcile(TEAM_NS, name) == DONE
    status = world.status(name)
    assert cond(status, "Failed") == ("True", "BackoffLimitExceeded") and status["phase"] == "Failed"


def test_refusals_wait_for_an_edit_or_come_back_after_the_backoff(world):
    closed = world.create(CLOSED_NS)
    assert world.rec.reconcile(CLOSED_NS, closed) == DONE  # only the namespace's label lifts it
    assert cond(world.status(closed, CLOSED_NS), "Admitted") == ("False", "NamespaceNotEnabled")

    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": BUDGET_QUOTA_NAME, "namespace": TEAM_NS},
        "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
    }
    world.cluster.create(quota)
    name = world.create()
    assert world.rec.reconcile(TEAM_NS, name) == RETRY  # the quota may free up: retried after the backoff
    assert cond(world.status(name), "Admitted")[0] == "False"
    assert world.cluster.list(JOB, TEAM_NS) == []
    world.cluster.patch(
        RESOURCE_QUOTA, BUDGET_QUOTA_NAME, {"spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}, TEAM_NS
    )
    assert not world.rec.reconcile(TEAM_NS, name).failed
    assert cond(world.status(name), "Admitted") == ("True", "Admitted")

    bad = world.create(
        name="bad", podTemplate={"spec": {"affinity": "x", "containers": [{"name": "t", "image": "b"}]}}
    )
    assert world.rec.reconcile(TEAM_NS, bad) != RETRY  # an invalid spec waits for its next edit
    assert cond(world.status(bad), "Admitted") == ("False", "InvalidSpec")


def test_a_lost_lease_stops_the_pass_before_its_next_write(world):
    name = world.create()
    before = len(world.cluster.writes)

    def deposed(verb: str, ref: Any) -> None:
        world.leader.leading = False

    world.cluster.on_write = deposed
    assert world.rec.reconcile(TEAM_NS, name) == DONE
    written = [(verb, ref.kind) for verb, ref in world.cluster.writes[before:]]
    assert written == [("create", SERVICE)]  # the first child (its Service before its Job), nothing after
    assert world.status(name) == {}
    world.cluster.on_write = None
    assert world.rec.reconcile(TEAM_NS, name) == DONE  # a standby writes nothing at all
    assert len(world.cluster.writes) == before + 1


def test_conditions_of_other_writers_are_kept(world):
    name = world.create()
    theirs = {"type": "Audited", "status": "True", "reason": "Reviewed", "message": "by the platform team"}
    world.cluster.patch_status(GPU_WORKLOAD, name, {"status": {"conditions": [theirs]}}, TEAM_NS)
    world.rec.reconcile(TEAM_NS, name)
    assert cond(world.status(name), "Audited") == ("True", "Reviewed")
    assert cond(world.status(name), "Admitted") == ("True", "Admitted")


def test_the_loop_retries_a_refusal_with_a_growing_backoff_and_admits_once_it_lifts(world):
    world.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": BUDGET_QUOTA_NAME, "namespace": TEAM_NS},
            "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
        }
    )
    controller = WorkloadController(world.rec, resync_seconds=3600)
    queue = controller.queue
    assert queue.backoff == BACKOFF  # a refusal comes back within 30 s at most
    queue.backoff = Backoff(base_seconds=0.01, cap_seconds=0.1)  # the test counts retries, it waits for none
    controller.start(world.stop)
    key = f"{TEAM_NS}/{world.create()}"
    wait_for("three refusals in a row", lambda: queue.failures(key) >= 3)
    world.cluster.patch(
        RESOURCE_QUOTA, BUDGET_QUOTA_NAME, {"spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}, TEAM_NS
    )
    wait_for(
        "admitted once the quota lifts",
        lambda: cond(world.status(key.split("/")[1]), "Admitted")[0] == "True",
    )
    wait_for("its failures forgotten", lambda: queue.failures(key) == 0)
    # a child's change queues its workload: the pod the kubelet binds
    before = controller.reconciles
    play_kubelet(world.cluster, key.split("/")[1], 0, ready=False)
    wait_for("the pod's change looked at", lambda: controller.reconciles > before)
    wait_for("scheduled", lambda: world.status(key.split("/")[1]).get("phase") == "Scheduled")


def kueue_says(cluster: MemoryCluster, name: str, run: int, ctype: str, reason: str) -> None:
    """Kueue's Workload of the run's pod group (owned by its pods, as Kueue makes it) with `ctype` true."""
    pods = cluster.list(POD, TEAM_NS, labels=f"{WORKLOAD_LABEL}={name},{RUN_LABEL}={run}")
    owners = [
        {"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
        for p in pods
    ]
    cluster.put(
        {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "Workload",
            "metadata": {"name": podgroup_name(name, run), "namespace": TEAM_NS, "ownerReferences": owners},
            "spec": {"queueName": KUEUE_DEFAULT_LOCAL_QUEUE},
            "status": {
                "admission": {"clusterQueue": "gpus"},
                "conditions": [{"type": ctype, "status": "True", "reason": reason, "message": "by Kueue"}],
            },
        }
    )


def pod_ends(cluster: MemoryCluster, pod: dict[str, Any], *, disrupted: bool) -> None:
    """The kubelet's verdict on one pod: Failed, by a disruption (Kueue's preemption) or on its own."""
    status: dict[str, Any] = {"phase": "Failed", "reason": "Error"}
    if disrupted:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "Preempted"}]
    cluster.put({**pod, "status": status})


def test_through_kueue_pods_wait_for_its_admission_preempted_ones_come_back_and_a_failure_takes_the_group(
    kueue_world,
):
    world = kueue_world
    name = world.create(retryPolicy={"maxRetries": 1, "backoffSeconds": 60, "jitter": 0})
    world.rec.reconcile(TEAM_NS, name)
    status = world.status(name)
    assert status["gangBackend"] == "Kueue" and cond(status, "Admitted") == ("True", "Admitted")
    assert "gang Kueue" in find(status["conditions"], "Admitted")["message"]
    assert world.cluster.list(JOB, TEAM_NS) == []  # the run's pods are KGWE's own, one Kueue pod group
    (pod,) = world.cluster.list(POD, TEAM_NS)
    assert pod["metadata"]["name"] == kueue_pod_names(GPUWorkload.model_validate(OWN), 0)[0]
    world.rec.reconcile(TEAM_NS, name)  # no Kueue Workload yet: the gang's time does not run
    status = world.status(name)
    assert cond(status, "KueueAdmitted") == ("False", "Pending")
    assert cond(status, "PodsScheduled") == ("False", "Queued")

    kueue_says(world.cluster, name, 0, "Admitted", "Admitted")
    world.clock.now += timedelta(seconds=30)
    world.rec.reconcile(TEAM_NS, name)
    status = world.status(name)
    assert cond(status, "KueueAdmitted") == ("True", "Admitted")
    assert status["runStartTime"] == "2026-11-01T12:00:30Z"  # the gang's time counts from Kueue's admission
    assert "KueueAdmitted" in [e["reason"] for e in world.cluster.objects(EVENT)]

    (pod,) = world.cluster.list(POD, TEAM_NS)
    pod_ends(world.cluster, pod, disrupted=True)  # preempted: Kueue leaves the replacement to its maker
    world.rec.reconcile(TEAM_NS, name)
    assert world.cluster.list(POD, TEAM_NS) == []
    world.rec.reconcile(TEAM_NS, name)
    (again,) = world.cluster.list(POD, TEAM_NS)
    assert (
        again["metadata"]["name"] == pod["metadata"]["name"]
        and again["metadata"]["uid"] != pod["metadata"]["uid"]
    )
    assert cond(world.status(name), "Failed") == ("", "")  # a disruption is not the job's failure

    kueue_says(world.cluster, name, 0, "Admitted", "Admitted")  # owned by the new pod
    pod_ends(world.cluster, again, disrupted=False)
    assert world.rec.reconcile(TEAM_NS, name).after_seconds == 60.0
    status = world.status(name)
    assert status["retryCount"] == 1 and cond(status, "PodsScheduled") == ("False", "Restarting")
    assert world.cluster.list(POD, TEAM_NS) == [] and world.cluster.list(KUEUE_WORKLOAD, TEAM_NS) == []


def test_a_kueue_workload_of_pods_the_workload_does_not_control_is_left_alone(kueue_world):
    world = kueue_world
    name = world.create(retryPolicy={"maxRetries": 0})
    world.rec.reconcile(TEAM_NS, name)
    kueue_says(world.cluster, name, 0, "Admitted", "Admitted")
    someone = world.cluster.get(KUEUE_WORKLOAD, podgroup_name(name, 0), TEAM_NS)
    someone["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "x"}]
    world.cluster.put(someone)
    (pod,) = world.cluster.list(POD, TEAM_NS)
    pod_ends(world.cluster, pod, disrupted=False)
    assert world.rec.reconcile(TEAM_NS, name) == DONE
    assert cond(world.status(name), "Failed") == ("True", "BackoffLimitExceeded")
    assert world.cluster.list(POD, TEAM_NS) == []
    assert [w["metadata"]["name"] for w in world.cluster.list(KUEUE_WORKLOAD, TEAM_NS)] == [
        podgroup_name(name, 0)
    ]
