"""The PolicyRepository reconciler's steps on the in-memory cluster (kgwe.runtime.memory) and a real Git
server: status transitions, refusals, prune, drift, leader loss, retries with backoff, and the controller's
loop (watch-driven queueing, webhook routing, the standby's hand-over). The real control plane proves the
same wiring end to end (test_controller_e2e.py and the other *_e2e modules)."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kgwe.gitops.webhook import repository_key
from kgwe.localcluster.gitserver import GitHttpsServer
from kgwe.localcluster.gpunodes import machine, node_manifest
from kgwe.reconcile.repositories import RepositoryController
from kgwe.reconcile.repository import RepositoryReconciler
from kgwe.reconcile.status import condition
from kgwe.runtime.kinds import CONFIG_MAP, EVENT, NODE, POLICY_REPOSITORY, RESOURCE_QUOTA
from kgwe.runtime.memory import MemoryCluster
from kgwe.runtime.queue import Backoff
from kgwe.vocab import (
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    PRUNE_ANNOTATION,
    PRUNE_DISABLED,
    RECONCILE_REQUESTED_AT_ANNOTATION,
)
from tests.harness.waiting import wait_for
from tests.reconcile.conftest import SCORING, PolicyRemote, strategy_yaml

NS = "kgwe-system"


class Leader:
    """The leader gate, as a test turns it."""

    def __init__(self) -> None:
        self.leading = True

    def __call__(self) -> bool:
        return self.leading


@pytest.fixture
def memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """A MemoryCluster with a pool of GPU nodes, a policy remote served over HTTPS on loopback, and a
    PolicyRepository pointing at it."""
    cluster = MemoryCluster()
    pool = f"mem-{secrets.token_hex(3)}"
    nodes = [f"{pool}-n{i}" for i in range(2)]
    for name in nodes:
        cluster.put(node_manifest(name, machine("DGX-H100"), labels={"kgwe.nvidia.io/pool": pool}))
    remote = PolicyRemote(tmp_path)
    server = GitHttpsServer(tmp_path).start()
    monkeypatch.setenv("GIT_SSL_CAINFO", server.ca_file)
    base = {"policy/mig.yaml": strategy_yaml(pool, max_unavailable="1"), "policy/scoring.yaml": SCORING}
    leader = Leader()

    def make_repository(interval: str = "1h", **spec: Any) -> None:
        body = {"url": server.url(remote.bare.name), "ref": {"branch": "main"}, "path": "policy"}
        cluster.create(
            {
                "apiVersion": POLICY_REPOSITORY.api_version,
                "kind": POLICY_REPOSITORY.kind,
                "metadata": {"name": pool, "namespace": NS},
                "spec": {**body, "interval": interval, **spec},
            }
        )

    def reconciler() -> RepositoryReconciler:
        cache = tmp_path / "cache"
        return RepositoryReconciler(cluster, NS, pool, cache_dir=cache, is_leader=leader, git_attempts=1)

    try:
        yield SimpleNamespace(
            cluster=cluster,
            pool=pool,
            nodes=nodes,
            remote=remote,
            server=server,
            base=base,
            leader=leader,
            make_repository=make_repository,
            reconciler=reconciler,
            status=lambda: (cluster.get(POLICY_REPOSITORY, pool, NS) or {}).get("status") or {},
        )
    finally:
        server.stop()


def mig_manager_reports(cluster: MemoryCluster) -> list[str]:
    """What the MIG manager does on every node KGWE relabelled (the state label dropped): success."""
    done = []
    for node in cluster.list(NODE):
        labels = node["metadata"].get("labels") or {}
        if MIG_CONFIG_LABEL in labels and MIG_STATE_LABEL not in labels:
            cluster.patch(
                NODE, node["metadata"]["name"], {"metadata": {"labels": {MIG_STATE_LABEL: "success"}}}
            )
            done.append(node["metadata"]["name"])
    return done


def events(cluster: MemoryCluster) -> list[str]:
    return [e["reason"] for e in cluster.objects(EVENT)]


def until_ready(memory: SimpleNamespace, rec: RepositoryReconciler) -> Any:
    """Reconcile, playing the MIG manager between passes, until the repository is ready."""
    for _ in range(10):
        outcome = rec.reconcile()
        if outcome is not None and outcome.phase == "ready":
            return outcome
        assert outcome is not None and outcome.phase == "progressing", outcome
        mig_manager_reports(memory.cluster)
    pytest.fail("the rollout did not finish in 10 passes")


def test_a_commit_rolls_out_node_by_node_and_its_status_follows(memory):
    first = memory.remote.commit(memory.base)
    memory.make_repository()
    rec = memory.reconciler()
    outcome = rec.reconcile()
    assert outcome.phase == "progressing"
    status = memory.status()
    assert condition(status, "Ready")["status"] == "Unknown"
    assert condition(status, "Reconciling")["reason"] == "Progressing"
    assert condition(status, "Stalled") is None
    assert status["lastAttemptedRevision"] == f"main@sha1:{first}" and status["observedGeneration"] == 1
    relabelled = [
        n
        for n in memory.nodes
        if "7x1g.10gb" in memory.cluster.get(NODE, n)["metadata"]["labels"][MIG_CONFIG_LABEL]
    ]
    assert relabelled == memory.nodes[:1]  # maxUnavailable 1
    assert {"ConfigMap"} <= {r.kind for r in rec.last_sync.created}
    until_ready(memory, rec)
    status = memory.status()
    assert condition(status, "Ready")["reason"] == "ReconciliationSucceeded"
    assert condition(status, "Reconciling") is None and status["lastAppliedRevision"] == f"main@sha1:{first}"
    # the status is KGWE's: written through its field manager, on the status subresource
    managed = memory.cluster.get(POLICY_REPOSITORY, memory.pool, NS)["metadata"]["managedFields"]
    assert {"manager": "kgwe-controller", "operation": "Update", "subresource": "status"} in managed

    writes, status_writes = len(memory.cluster.writes), rec.status_writes
    assert rec.reconcile().phase == "ready"  # a no-op pass writes nothing at all
    assert len(memory.cluster.writes) == writes and rec.status_writes == status_writes


def test_an_invalid_commit_applies_nothing_and_stalls_until_fixed(memory):
    good = memory.remote.commit(memory.base)
    memory.make_repository()
    rec = memory.reconciler()
    until_ready(memory, rec)
    invalid = "apiVersion: kgwe.nvidia.io/v1\nkind: MIGStrategy\nmetadata: {name: x}\nspec: {bogus: 1}\n"
    memory.remote.commit({"policy/mig.yaml": invalid})
    writes = len(memory.cluster.writes)
    outcome = rec.reconcile()
    assert outcome.phase == "invalid" and "mig.yaml" in outcome.message
    status = memory.status()
    assert condition(status, "Stalled")["reason"] == "ValidationFailed"
    assert status["lastAppliedRevision"] == f"main@sha1:{good}"  # the last good one stays in force
    assert [verb for verb, _ in memory.cluster.writes[writes:]] == ["create", "patch_status"]  # Event, status
    assert "ValidationFailed" in events(memory.cluster)
    memory.remote.commit(memory.base | {"policy/note.txt": "fixed"})
    assert rec.reconcile().phase == "ready"
    assert condition(memory.status(), "Stalled") is None


def test_an_invalid_spec_is_said_once(memory):
    memory.remote.commit(memory.base)
    memory.make_repository(interval="soon")
    rec = memory.reconciler()
    assert rec.reconcile().phase == "spec_invalid"
    assert rec.reconcile().phase == "spec_invalid"
    ready = condition(memory.status(), "Ready")
    assert ready["reason"] == "InvalidSpec" and "spec.interval" in ready["message"]
    assert events(memory.cluster).count("InvalidSpec") == 1  # one Event per new problem, not one per pass
    assert rec.interval_seconds() == 60.0  # read again every minute until its spec is fixed


BUDGET = """apiVersion: kgwe.nvidia.io/v1
kind: GPUBudget
metadata: {name: NAME}
spec:
  team: NAME
  namespaces: [NAME-ns]
  period: Weekly
  limit: {amount: "100.00", currency: USD}
  quota: {nvidia.com/gpu: 4}
"""


def test_prune_removes_what_is_no_longer_rendered_and_drift_is_taken_back(memory):
    budgets = {f"policy/budgets/{n}.yaml": BUDGET.replace("NAME", n) for n in ("gone", "kept", "held")}
    memory.remote.commit(memory.base | budgets)
    memory.make_repository()
    rec = memory.reconciler()
    until_ready(memory, rec)
    quotas = {(r.namespace, r.name) for r in rec.last_sync.unchanged if r.kind == "ResourceQuota"}
    assert {ns for ns, _ in quotas} == {"gone-ns", "kept-ns", "held-ns"}
    # a hand edit of a field KGWE owns: taken back and counted as drift
    _, quota = next(iter(quotas))
    hard = memory.cluster.get(RESOURCE_QUOTA, quota, "kept-ns")["spec"]["hard"]
    edited = {"spec": {"hard": dict.fromkeys(hard, "99")}}
    memory.cluster.patch(RESOURCE_QUOTA, quota, edited, "kept-ns")
    rec.reconcile()
    assert [(r.namespace, r.name) for r in rec.last_sync.drift_corrected] == [("kept-ns", quota)]
    assert memory.cluster.get(RESOURCE_QUOTA, quota, "kept-ns")["spec"]["hard"] == hard
    # two budgets leave the policy: one quota pruned, the one marked prune: disabled kept
    protect = {"metadata": {"annotations": {PRUNE_ANNOTATION: PRUNE_DISABLED}}}
    memory.cluster.patch(RESOURCE_QUOTA, quota, protect, "held-ns")
    memory.remote.commit({"policy/budgets/gone.yaml": None, "policy/budgets/held.yaml": None})
    assert rec.reconcile().phase == "ready"
    assert [r.namespace for r in rec.last_sync.pruned] == ["gone-ns"]
    assert [r.namespace for r in rec.last_sync.prune_skipped] == ["held-ns"]
    assert memory.cluster.get(RESOURCE_QUOTA, quota, "gone-ns") is None
    assert memory.cluster.get(RESOURCE_QUOTA, quota, "held-ns") is not None
    assert "Pruned" in events(memory.cluster)


def test_a_refused_object_fails_the_pass_and_the_next_retry_mends_it(memory):
    memory.remote.commit(memory.base)
    memory.make_repository()
    rec = memory.reconciler()
    memory.cluster.fail("apply", CONFIG_MAP, status=422, times=2)  # its dry run, then nothing more
    outcome = rec.reconcile()
    assert outcome.phase == "apply_failed" and "injected" in outcome.message
    assert condition(memory.status(), "Reconciling")["reason"] == "ProgressingWithRetry"
    assert all(
        memory.cluster.get(NODE, n)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-disabled"
        for n in memory.nodes
    )
    assert rec.reconcile().phase == "progressing"  # the retry goes through


def test_a_lost_lease_stops_the_pass_before_its_next_write(memory):
    memory.remote.commit(memory.base)
    memory.make_repository()
    rec = memory.reconciler()

    def deposed_after_first_write(verb: str, ref: Any) -> None:
        memory.leader.leading = False

    before = len(memory.cluster.writes)
    memory.cluster.on_write = deposed_after_first_write
    assert rec.reconcile() is None  # NotLeader: the pass stops, no status is written
    # the pass's first write (its finalizer on the PolicyRepository) and nothing after it
    assert [(verb, ref.kind) for verb, ref in memory.cluster.writes[before:]] == [
        ("patch", POLICY_REPOSITORY)
    ]
    assert memory.status() == {}
    assert rec.metrics.results.labels(memory.pool, "not_leader")._value.get() == 1
    memory.cluster.on_write = None
    memory.leader.leading = True
    assert rec.reconcile().phase == "progressing"  # the next leader's pass carries on


def test_a_deleted_repository_is_released_before_its_finalizer_goes(memory):
    memory.remote.commit(memory.base)
    memory.make_repository()
    rec = memory.reconciler()
    until_ready(memory, rec)
    applied = [(r.kind, r.namespace, r.name) for r in rec.last_sync.unchanged if r.kind == "ConfigMap"]
    assert applied and memory.cluster.delete(POLICY_REPOSITORY, memory.pool, NS)
    held = memory.cluster.get(POLICY_REPOSITORY, memory.pool, NS)
    assert held is not None and held["metadata"]["deletionTimestamp"]  # KGWE's finalizer keeps it
    for _ in range(10):  # the way out, the test playing the MIG manager as the nodes go back
        if rec.reconcile() is None:
            break
        mig_manager_reports(memory.cluster)
    assert memory.cluster.get(POLICY_REPOSITORY, memory.pool, NS) is None  # released: the finalizer went
    assert all(
        memory.cluster.get(CONFIG_MAP, name, ns) is None for _, ns, name in applied
    )  # deletionPolicy Delete
    assert "Released" in events(memory.cluster)


@pytest.fixture
def controller(memory) -> Iterator[RepositoryController]:
    """The controller's loop over the in-memory cluster, its reconcilers kept per repository."""
    reconcilers: dict[str, RepositoryReconciler] = {}

    def reconciler_for(name: str) -> RepositoryReconciler:
        if name not in reconcilers:
            reconcilers[name] = memory.reconciler()
        return reconcilers[name]

    stop = threading.Event()
    backoff = Backoff(base_seconds=0.05, cap_seconds=0.5)  # the test counts retries, it waits for none
    loop = RepositoryController(memory.cluster, NS, reconciler_for, gate=memory.leader, backoff=backoff)
    assert loop.loop.queue.backoff == backoff
    loop.start(stop)
    yield loop
    stop.set()


def settled(loop: RepositoryController) -> bool:
    return loop.loop.queue.idle()


def test_the_loop_reconciles_on_changes_not_on_its_own_status_writes(memory, controller):
    memory.remote.commit(memory.base)
    memory.make_repository()
    wait_for("the first pass", lambda: controller.reconciles >= 1 and settled(controller))
    passes = controller.reconciles
    assert passes == 1  # its status write is not a change that asks for a pass
    memory.cluster.patch(POLICY_REPOSITORY, memory.pool, {"spec": {"path": "policy/"}}, NS)  # a spec edit
    wait_for("the edit's pass", lambda: controller.reconciles > passes and settled(controller))
    assert controller.reconciles == passes + 1


def test_a_push_queues_only_the_repositories_it_names_and_a_standby_hands_it_over(memory, controller):
    memory.remote.commit(memory.base)
    memory.make_repository()
    wait_for("the first pass", lambda: controller.reconciles == 1 and settled(controller))
    controller.push(frozenset({"git.example.com/elsewhere"}))
    assert settled(controller) and controller.reconciles == 1
    memory.leader.leading = False  # a standby gets the push: it stamps the repository for the leader
    url = memory.cluster.get(POLICY_REPOSITORY, memory.pool, NS)["spec"]["url"]
    controller.push(frozenset({repository_key(url)}))
    stamped = memory.cluster.get(POLICY_REPOSITORY, memory.pool, NS)["metadata"]["annotations"]
    assert RECONCILE_REQUESTED_AT_ANNOTATION in stamped and controller.reconciles == 1
    memory.leader.leading = True  # the leader sees the stamp and reconciles, pushed
    wait_for("the requested pass", lambda: controller.reconciles == 2 and settled(controller))


def test_a_failing_pass_is_retried_after_a_growing_backoff(memory, controller):
    memory.remote.commit(memory.base)
    memory.server.stop()  # Git unreachable: ProgressingWithRetry
    memory.make_repository()
    queue = controller.loop.queue
    wait_for("two failed passes", lambda: queue.failures(memory.pool) >= 2, 60)
    assert condition(memory.status(), "Ready")["reason"] == "GitOperationFailed"
    assert queue.backoff.ceiling(queue.failures(memory.pool)) > queue.backoff.ceiling(1)
