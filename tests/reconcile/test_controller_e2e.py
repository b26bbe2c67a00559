"""End to end on the real control plane: commits applied, invalid commits applied nowhere,
MIG rollouts that respect maxUnavailable and busy nodes, a failing node stopping its pool, a controller
restarted mid-rollout finishing without repeating work, webhook-triggered sync, one active replica."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
import urllib.request

import pytest
from kubernetes import client, watch

from kgwe.gitops.webhook import PushEvent, sign
from kgwe.reconcile.controller import Controller
from kgwe.reconcile.repository import RepositoryReconciler
from kgwe.reconcile.status import condition
from kgwe.vocab import (
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    POD_TEMPLATE_POLICY_CONFIGMAP,
    RECONCILE_REQUESTED_AT_ANNOTATION,
    RUNTIMES_CONFIG_KEY,
    RUNTIMES_CONFIGMAP,
)
from tests.harness.waiting import nodes_watched, repeat_until, wait_for

pytestmark = pytest.mark.cluster

SYSTEM_NS = "kgwe-system"


def reconciler(k8s_api, e2e, **kw) -> RepositoryReconciler:
    cache = e2e.tmp / f"cache-{time.monotonic_ns()}"
    return RepositoryReconciler(k8s_api, SYSTEM_NS, e2e.pool, cache_dir=cache, **kw)


def drive(rec: RepositoryReconciler, done, *, on_step=None, timeout_seconds: float = 90.0):
    """Reconcile repeatedly (as the interval would) until `done(outcome)`; fail if it never is."""

    def step():
        outcome = rec.reconcile()
        if on_step:
            on_step(outcome)
        return outcome

    return repeat_until(
        "reconcile to settle",
        step,
        done,
        timeout_seconds,
        watch=nodes_watched(rec.cluster),
    )


class LabelRecorder:
    """Watches the pool's nodes and records every nvidia.com/mig.config value change per node, plus the
    largest number of nodes in flight (config label set, state not yet success) at any moment."""

    def __init__(self, core: client.CoreV1Api, pool: str) -> None:
        self.core, self.pool = core, pool
        self.changes: dict[str, list[str]] = {}
        self.in_flight_peak = 0
        self._state: dict[str, tuple[str | None, str | None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        listing = self.core.list_node(label_selector=f"kgwe.nvidia.io/pool={self.pool}")
        for n in listing.items:
            labels = n.metadata.labels or {}
            self._state[n.metadata.name] = (labels.get(MIG_CONFIG_LABEL), labels.get(MIG_STATE_LABEL))
        self._rv = listing.metadata.resource_version
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        w = watch.Watch()
        while not self._stop.is_set():
            for event in w.stream(
                self.core.list_node,
                label_selector=f"kgwe.nvidia.io/pool={self.pool}",
                resource_version=self._rv,
                timeout_seconds=1,
            ):
                node = event["object"]
                self._rv = node.metadata.resource_version
                labels = node.metadata.labels or {}
                name = node.metadata.name
                config, state = labels.get(MIG_CONFIG_LABEL), labels.get(MIG_STATE_LABEL)
                if self._state.get(name, (None, None))[0] != config:
                    self.changes.setdefault(name, []).append(config)
                self._state[name] = (config, state)
                flying = sum(1 for c, s in self._state.values() if s != "success")
                self.in_flight_peak = max(self.in_flight_peak, flying)
                if self._stop.is_set():
                    w.stop()


def gpu_pod(name: str, node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def ready(outcome) -> bool:
    return outcome is not None and outcome.phase == "ready"


def test_commit_rolls_through_respecting_busy_nodes_and_invalid_commit_changes_nothing(
    k8s_api, e2e, kgwe_mig_manager
):
    nodes = e2e.make_nodes(3)
    e2e.core.create_namespaced_pod(e2e.namespace, gpu_pod("busy", nodes[0]))
    first = e2e.remote.commit(e2e.base)
    e2e.make_repository()
    rec = reconciler(k8s_api, e2e)
    seen_waiting: list[str] = []

    def step(outcome):
        progress = (outcome.rollout or {}).get(e2e.pool, {}) if outcome else {}
        seen_waiting.extend(progress.get("waitingBusy", []))
        if (
            len(e2e.labels(nodes[1]).get(MIG_CONFIG_LABEL, ""))
            and seen_waiting
            and all(
                e2e.labels(n).get(MIG_STATE_LABEL) == "success"
                and e2e.labels(n).get(MIG_CONFIG_LABEL) != "all-disabled"
                for n in nodes[1:]
            )
        ):
            # the idle nodes are done while the busy one waited: now its job finishes
            with contextlib.suppress(client.exceptions.ApiException):
                e2e.core.delete_namespaced_pod("busy", e2e.namespace, grace_period_seconds=0)

    with LabelRecorder(e2e.core, e2e.pool) as recorder:
        outcome = drive(rec, ready, on_step=step)
    assert nodes[0] in seen_waiting, "the busy node must wait while a pod holds its GPUs"
    assert recorder.in_flight_peak <= 1, "maxUnavailable: 1 was exceeded"
    configs = {n: e2e.labels(n)[MIG_CONFIG_LABEL] for n in nodes}
    assert len(set(configs.values())) == 1 and "7x1g.10gb" in configs[nodes[0]]
    assert all(len(v) == 1 for v in recorder.changes.values()), recorder.changes  # each node relabelled once
    status = e2e.status()
    assert status["lastAppliedRevision"] == f"main@sha1:{first}"
    assert condition(status, "Ready")["status"] == "True"
    kinds = {(i["kind"], i["name"]) for i in status["inventory"]}
    assert ("ConfigMap", "kgwe-mig-parted-config") in kinds and ("ConfigMap", "kgwe-scoring") in kinds
    # what the GPUWorkload controller reads: the policy's WorkloadRuntimes and PodTemplatePolicies
    assert {("ConfigMap", RUNTIMES_CONFIGMAP), ("ConfigMap", POD_TEMPLATE_POLICY_CONFIGMAP)} <= kinds
    assert e2e.core.read_namespaced_config_map(RUNTIMES_CONFIGMAP, SYSTEM_NS).data[RUNTIMES_CONFIG_KEY]
    cm = e2e.core.read_namespaced_config_map("kgwe-mig-parted-config", "gpu-operator")

    # An invalid commit: nothing is applied, status names file and line, the last good revision stays.
    bad = e2e.remote.commit({"policy/scoring.yaml": e2e.SCORING.replace("BinPack", "Sideways")}, "bad")
    outcome = rec.reconcile()
    assert outcome.phase == "invalid"
    status = e2e.status()
    ready_cond = condition(status, "Ready")
    assert ready_cond["status"] == "False" and ready_cond["reason"] == "ValidationFailed"
    assert "scoring.yaml:8:" in ready_cond["message"], ready_cond["message"]
    assert status["lastAppliedRevision"] == f"main@sha1:{first}"
    assert status["lastAttemptedRevision"] == f"main@sha1:{bad}"
    assert condition(status, "Stalled")["status"] == "True"
    again = e2e.core.read_namespaced_config_map("kgwe-mig-parted-config", "gpu-operator")
    assert again.metadata.resource_version == cm.metadata.resource_version

    # A no-op reconcile writes nothing; a hand edit is corrected and counted.
    fixed = e2e.remote.commit({"policy/scoring.yaml": e2e.SCORING}, "fix")
    assert ready(rec.reconcile())
    writes_before = rec.metrics.writes.labels(e2e.pool)._value.get()
    status_rv = e2e.obj()["metadata"]["resourceVersion"]
    assert ready(rec.reconcile())
    assert rec.metrics.writes.labels(e2e.pool)._value.get() == writes_before
    assert e2e.obj()["metadata"]["resourceVersion"] == status_rv
    e2e.core.patch_namespaced_config_map(
        "kgwe-scoring", SYSTEM_NS, {"data": {"profiles.json": "{}"}}, field_manager="kubectl-edit"
    )
    assert ready(rec.reconcile())
    assert [str(r) for r in rec.last_sync.drift_corrected] == ["ConfigMap/kgwe-system/kgwe-scoring"]
    assert e2e.status()["lastAppliedRevision"] == f"main@sha1:{fixed}"


def test_failed_node_stops_the_pool_and_restart_resumes_without_repeating(k8s_api, e2e, kgwe_mig_manager):
    nodes = e2e.make_nodes(4)
    e2e.remote.commit(
        {
            "policy/mig.yaml": e2e.strategy_yaml(e2e.pool, max_unavailable="2"),
            "policy/scoring.yaml": e2e.SCORING,
        }
    )
    e2e.make_repository()
    with LabelRecorder(e2e.core, e2e.pool) as recorder:
        # First controller: one reconcile starts two nodes, then it "dies" (dropped, nothing released).
        first = reconciler(k8s_api, e2e)
        outcome = first.reconcile()
        assert outcome.phase == "progressing"
        started = [a.node for a in first.last_plan.actions if a.kind == "relabel"]
        assert len(started) == 2
        del first
        # A new controller (fresh caches) reads the rollout state back from the nodes and finishes it.
        second = reconciler(k8s_api, e2e)
        drive(second, ready)
        assert recorder.in_flight_peak <= 2
        assert all(len(v) == 1 for v in recorder.changes.values()), recorder.changes
        assert set(recorder.changes) == set(nodes)

    # Next policy: the MIG manager fails on one node → that pool stops, status names the node.
    bad_node = nodes[1]
    original = kgwe_mig_manager._plan

    def failing_plan(node, config_name):
        from kgwe.localcluster.migmanager import InvalidMigConfig

        if node.metadata.name == bad_node:
            raise InvalidMigConfig("simulated hardware failure")
        return original(node, config_name)

    kgwe_mig_manager._plan = failing_plan
    e2e.remote.commit({"policy/mig.yaml": e2e.strategy_yaml(e2e.pool, "3g.40gb: 100%", max_unavailable="1")})
    rec = reconciler(k8s_api, e2e)
    drive(rec, lambda o: o is not None and o.phase == "stalled")
    status = e2e.status()
    assert condition(status, "Stalled")["status"] == "True"
    assert bad_node in condition(status, "Ready")["message"]
    progress = status["rollout"][e2e.pool]
    assert progress["failed"] == [bad_node] and progress["stopped"]
    # Nothing after the failure: later nodes (by name) keep the previous config.
    for later in nodes[2:]:
        assert "3g.40gb" not in e2e.labels(later)[MIG_CONFIG_LABEL]
    assert rec.reconcile().phase == "stalled"  # and it stays stopped
    for later in nodes[2:]:
        assert "3g.40gb" not in e2e.labels(later)[MIG_CONFIG_LABEL]


def test_webhook_sync_and_only_one_replica_acts(k8s_api, e2e, kgwe_mig_manager):
    e2e.make_nodes(1)
    first = e2e.remote.commit(e2e.base)
    e2e.make_repository(interval="1h")
    secret = b"hook-secret"
    lease = f"kgwe-{e2e.pool}"
    replicas = [
        Controller(
            k8s_api,
            SYSTEM_NS,
            cache_dir=e2e.tmp / f"r{i}",
            identity=f"replica-{i}",
            webhook_secret=secret,
            listen=("127.0.0.1", 0),
            lease_name=lease,
            lease_duration_seconds=3,
            renew_deadline_seconds=2,
            retry_period_seconds=0.3,
        )
        for i in range(2)
    ]
    stops = [threading.Event() for _ in replicas]
    threads = [
        threading.Thread(target=r.run, args=(s,), daemon=True) for r, s in zip(replicas, stops, strict=True)
    ]
    for t in threads:
        t.start()
    try:
        wait_for(
            "the first revision applied",
            lambda: e2e.status().get("lastAppliedRevision") == f"main@sha1:{first}",
            60,
        )
        leaders = [r for r in replicas if r.is_leader()]
        assert len(leaders) == 1
        standby = next(r for r in replicas if r is not leaders[0])
        assert standby.reconciles == 0

        # A commit + signed push: applied at once although the interval is 1h.
        second = e2e.remote.commit({"policy/mig.yaml": e2e.strategy_yaml(e2e.pool, "2g.20gb: 100%")})
        body = json.dumps(
            {
                "ref": "refs/heads/main",
                "after": second,
                "commits": [{"modified": ["policy/mig.yaml"]}],
                "repository": {"clone_url": e2e.remote.url},
            }
        ).encode()
        for r in replicas:  # the Service may route to either; the standby does nothing with it
            headers = {
                "Content-Type": "application/json",
                "X-GitHub-Event": "push",
                "X-Hub-Signature-256": sign(secret, body),
            }
            req = urllib.request.Request(
                f"http://127.0.0.1:{r.server.port}/hooks/git", data=body, method="POST", headers=headers
            )
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 202
        wait_for(
            "the webhook push applied",
            lambda: e2e.status().get("lastAppliedRevision") == f"main@sha1:{second}",
            60,
        )
        assert standby.reconciles == 0
        # A reports-only push is ignored (no self-triggered reconcile). First the reconciles the push started
        # end: the standby asked the leader through the annotation, which the leader handles once.
        requested = e2e.obj()["metadata"]["annotations"][RECONCILE_REQUESTED_AT_ANNOTATION]
        loop = leaders[0].repositories.loop
        wait_for(
            "the standby's request handled",
            lambda: (view := loop.view(e2e.pool)) is not None and view[1] == requested and loop.queue.idle(),
            60,
        )
        before = leaders[0].reconciles
        hooks = leaders[0].metrics.hooks
        ignored, triggered = (hooks.labels(o)._value.get() for o in ("ignored_reports_only", "triggered"))
        leaders[0].on_push(PushEvent("refs/heads/main", None, "push", ("reports/x.md",)))
        # on_push answered on its ignoring path, the one that queues nothing
        assert hooks.labels("ignored_reports_only")._value.get() == ignored + 1
        assert hooks.labels("triggered")._value.get() == triggered
        assert leaders[0].reconciles == before
        with urllib.request.urlopen(f"http://127.0.0.1:{leaders[0].server.port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        assert "kgwe_reconcile_total" in text and 'outcome="ignored_reports_only"' in text

        # The leader stops: the standby takes over and reconciles.
        stops[replicas.index(leaders[0])].set()
        wait_for("the standby to take over", lambda: standby.reconciles > 0, 30)
    finally:
        for s in stops:
            s.set()
        for t in threads:
            t.join(timeout=15)


def test_drain_rollout_respects_pdb_then_uncordons_and_snapshot_is_committed_back(
    k8s_api, e2e, kgwe_mig_manager
):
    nodes = e2e.make_nodes(1)
    node = nodes[0]
    pod = gpu_pod("trainer", node)
    pod["metadata"]["labels"] = {"app": "trainer"}
    e2e.core.create_namespaced_pod(e2e.namespace, pod)
    policy = client.PolicyV1Api(k8s_api)
    policy.create_namespaced_pod_disruption_budget(
        e2e.namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}},
        },
    )
    e2e.remote.commit({**e2e.base, "policy/mig.yaml": e2e.strategy_yaml(e2e.pool, drain=True)})
    e2e.make_repository(reports={"path": "reports/e2e"})
    rec = reconciler(k8s_api, e2e)
    outcome = rec.reconcile()
    assert outcome.phase == "progressing"
    n = e2e.core.read_node(node)
    assert n.spec.unschedulable  # cordoned for the change
    assert n.metadata.labels[MIG_CONFIG_LABEL] == "all-disabled"  # not relabelled while the pod runs
    assert e2e.core.read_namespaced_pod("trainer", e2e.namespace).metadata.deletion_timestamp is None  # PDB
    assert rec.reconcile().phase == "progressing"
    assert e2e.status()["rollout"][e2e.pool]["draining"] == [node]

    policy.delete_namespaced_pod_disruption_budget("keep", e2e.namespace)
    drive(rec, ready)
    n = e2e.core.read_node(node)
    assert not n.spec.unschedulable and "7x1g.10gb" in n.metadata.labels[MIG_CONFIG_LABEL]
    events = e2e.core.list_namespaced_event(SYSTEM_NS, field_selector=f"involvedObject.name={e2e.pool}").items
    reasons = {e.reason for e in events}
    assert {"NodeCordoned", "EvictionBlocked", "MIGConfigSelected", "NodeUncordoned", "Applied"} <= reasons

    # The GPUInventory snapshot was committed back under reports/ by the bot, and it is a valid inventory
    # of the cluster (so `kgwe plan` in CI can use it offline).
    text = subprocess.run(
        ["git", "show", "main:reports/e2e/gpu-inventory.yaml"],
        cwd=e2e.remote.bare,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    author = subprocess.run(
        ["git", "log", "-1", "--format=%an", "main"],
        cwd=e2e.remote.bare,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    import yaml

    from kgwe.policy import GPUInventory

    inventory = GPUInventory.model_validate(yaml.safe_load(text))
    assert author == "kgwe-bot" and inventory.node(node) is not None
    # The bot's own commit touches only reports/: the next reconcile changes nothing and commits nothing.
    head_before = subprocess.run(
        ["git", "rev-parse", "main"], cwd=e2e.remote.bare, capture_output=True, text=True, check=True
    ).stdout
    assert ready(rec.reconcile())
    assert rec.last_sync.writes == 0
    assert (
        subprocess.run(
            ["git", "rev-parse", "main"], cwd=e2e.remote.bare, capture_output=True, text=True, check=True
        ).stdout
        == head_before
    )


def test_commit_back_rejected_for_good_is_reported_not_retried(k8s_api, e2e, kgwe_mig_manager):
    e2e.make_nodes(1)
    e2e.remote.commit(e2e.base)
    hook = e2e.remote.bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'reports/ is protected' >&2\nexit 1\n")
    hook.chmod(0o755)
    e2e.make_repository(reports={"path": "reports/e2e"})
    rec = reconciler(k8s_api, e2e)
    drive(rec, ready)
    status = e2e.status()
    assert "protected" in status["reportsStatus"]["lastPushError"]
    rejected = rec.metrics.commit_back_rejected.labels(e2e.pool)._value.get()
    assert rejected >= 1  # the snapshot's, and the audit log's (dropped, not retried: a Warning said so)
    assert ready(rec.reconcile())  # the same snapshot is not pushed again
    assert rec.metrics.commit_back_rejected.labels(e2e.pool)._value.get() == rejected
    assert not rec.audit.entries
    reasons = {
        e.reason
        for e in e2e.core.list_namespaced_event(
            SYSTEM_NS, field_selector=f"involvedObject.name={e2e.pool}"
        ).items
    }
    assert "CommitBackRejected" in reasons


def test_git_credentials_come_from_the_referenced_secret(k8s_api, e2e):
    e2e.make_nodes(1)
    e2e.remote.commit(e2e.base)
    e2e.make_repository()
    e2e.custom.patch_namespaced_custom_object(
        "kgwe.nvidia.io",
        "v1",
        SYSTEM_NS,
        "policyrepositories",
        e2e.pool,
        {"spec": {"secretRef": {"name": f"{e2e.pool}-git"}}},
        _content_type="application/merge-patch+json",
    )
    rec = reconciler(k8s_api, e2e)
    outcome = rec.reconcile()  # the Secret does not exist yet: a clear fetch failure, nothing applied
    assert outcome.phase == "fetch_failed" and f"{e2e.pool}-git" in outcome.message
    ready_cond = condition(e2e.status(), "Ready")
    assert ready_cond["reason"] == "GitOperationFailed" and "lastAppliedRevision" not in e2e.status()
    e2e.core.create_namespaced_secret(
        SYSTEM_NS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"{e2e.pool}-git",
                "labels": {"kgwe.nvidia.io/git-credentials": "true"},
                "annotations": {"kgwe.nvidia.io/git-hosts": e2e.remote.url.split("/")[2]},
            },
            "stringData": {"username": "kgwe-bot", "password": "token-123"},
        },
    )
    try:
        again = rec.reconcile()
        assert again.phase in ("ready", "progressing"), again.message
        source = next(iter(rec.git._sources.values()))
        assert source.credentials.username == "kgwe-bot" and source.credentials.password == "token-123"
    finally:
        e2e.core.delete_namespaced_secret(f"{e2e.pool}-git", SYSTEM_NS)


def test_node_stuck_pending_past_the_timeout_stalls_the_pool(k8s_api, e2e):
    """No MIG manager answers (docs/facts/mig.md §9: a manager wedged in pending): Stalled naming the node."""
    nodes = e2e.make_nodes(2)
    e2e.remote.commit({**e2e.base, "policy/mig.yaml": e2e.strategy_yaml(e2e.pool, pending_timeout="1s")})
    e2e.make_repository()
    rec = reconciler(k8s_api, e2e)
    assert rec.reconcile().phase == "progressing"
    first = [a.node for a in rec.last_plan.actions if a.kind == "relabel"]
    assert first == [nodes[0]]
    outcome = wait_for(
        "the 1 s pending timeout to pass", lambda: (o := rec.reconcile()).phase == "stalled" and o, 30
    )
    assert nodes[0] in outcome.message
    status = e2e.status()
    assert status["rollout"][e2e.pool]["timedOut"] == [nodes[0]]
    assert condition(status, "Stalled")["reason"] == "RolloutStalled"
    assert e2e.labels(nodes[1])[MIG_CONFIG_LABEL] == "all-disabled"  # the pool stopped


def test_plan_against_the_live_cluster_inventory(k8s_api, e2e, kgwe_mig_manager, control_plane, capsys):
    """`kgwe plan --kubeconfig`: after a rollout, a change of the pool's mix shows its nodes repartitioned."""
    from kgwe.cli import main

    nodes = e2e.make_nodes(2)
    e2e.remote.commit(e2e.base)
    e2e.make_repository()
    drive(reconciler(k8s_api, e2e), ready)
    e2e.remote.commit({"policy/mig.yaml": e2e.strategy_yaml(e2e.pool, "3g.40gb: 100%")})
    code = main(
        [
            "plan",
            "--repo",
            str(e2e.remote.work),
            "--base",
            "HEAD~1",
            "--head",
            "HEAD",
            "policy",
            "--kubeconfig",
            str(control_plane.kubeconfig_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 2 and "live cluster" in out
    row = next(line for line in out.splitlines() if line.startswith(f"| {e2e.pool} |"))
    # The plan shows the change's end state (the rollout paces it 1 node at a time): both nodes, 16 GPUs.
    cells = [c.strip() for c in row.split("|")]
    assert cells[2] == "16 of 16" and cells[3] == "2 of 2", row
    assert "1g.10gb → 3g.40gb" in out.replace("7×1g.10gb", "1g.10gb").replace("2×3g.40gb", "3g.40gb")
    assert any(n in out for n in nodes)
    # The same revision on both sides against the live cluster: nothing to do.
    assert (
        main(
            [
                "plan",
                "--repo",
                str(e2e.remote.work),
                "--base",
                "HEAD~1",
                "--head",
                "HEAD~1",
                "policy",
                "--kubeconfig",
                str(control_plane.kubeconfig_path),
            ]
        )
        == 0
    )


def test_audit_entries_waiting_when_the_leader_stops_are_committed_before_it_goes(k8s_api, e2e):
    """The audit log is batched (at most every audit_interval_seconds, or with a snapshot); what waits lives
    in the leader's memory, so a leader that stops commits it before it gives up the Lease."""
    e2e.make_nodes(1)
    first = e2e.remote.commit(e2e.base)
    e2e.make_repository(reports={"path": "reports"})
    controller = Controller(
        k8s_api,
        SYSTEM_NS,
        cache_dir=e2e.tmp / "flush",
        listen=None,
        lease_name=f"kgwe-{e2e.pool}",
        retry_period_seconds=0.3,
        audit_interval_seconds=3600,
    )
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(
            "the first revision applied",
            lambda: e2e.status().get("lastAppliedRevision") == f"main@sha1:{first}",
            60,
        )
        wait_for("the first pass's line logged", lambda: "auditLog" in e2e.status(), 60)
        key = sorted(e2e.core.read_namespaced_config_map("kgwe-scoring", SYSTEM_NS).data)[0]
        kept = e2e.core.read_namespaced_config_map("kgwe-scoring", SYSTEM_NS).data[key]
        e2e.core.patch_namespaced_config_map("kgwe-scoring", SYSTEM_NS, {"data": {key: "hand edited"}})
        controller.repositories.loop.add(e2e.pool)  # as a push naming it would
        wait_for(
            "the hand edit put back",
            lambda: e2e.core.read_namespaced_config_map("kgwe-scoring", SYSTEM_NS).data[key] == kept,
            60,
        )
        wait_for("the pass done", controller.repositories.loop.queue.idle, 60)
        lines_before = e2e.status()["auditLog"]["lines"]
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    log_file = e2e.status()["auditLog"]["path"]
    text = subprocess.run(
        ["git", "show", f"main:{log_file}"], cwd=e2e.remote.bare, capture_output=True, text=True, check=True
    ).stdout
    last = json.loads(text.splitlines()[-1])
    assert last["objects"]["driftCorrected"]["names"] == ["ConfigMap/kgwe-system/kgwe-scoring"]
    assert e2e.status()["auditLog"]["lines"] == lines_before + 1 == len(text.splitlines())
