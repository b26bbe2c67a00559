"""Offboarding on the real control plane: a PolicyRepository deleted mid-rollout, its Git server gone,
releases what KGWE wrote — its budget quota and rendered ConfigMaps at once, each node's MIG label back to
`all-disabled` exactly once (the node the MIG manager was applying only after it reported, the busy node
only once its pod ended), the mig-parted ConfigMap last — then lets its finalizer go; with
`deletionPolicy: Retain` the policy stays in force and only an Enforce cap and a drain's cordon are lifted."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.reconcile.release import MIG_POOL
from kgwe.reconcile.repository import RepositoryReconciler
from kgwe.reconcile.status import condition
from kgwe.vocab import (
    BUDGET_QUOTA_NAME,
    CORDONED_ANNOTATION,
    MIG_ALL_DISABLED,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    POLICY_REPOSITORY_FINALIZER,
    REQUESTED_AT_ANNOTATION,
    REVISION_ANNOTATION,
    ROLLOUT_REVISION_ANNOTATION,
    UNCAPPED_HARD_ANNOTATION,
)
from tests.reconcile.test_controller_e2e import LabelRecorder, drive, gpu_pod, ready, reconciler

pytestmark = pytest.mark.cluster

SYSTEM_NS, MIG_NS = "kgwe-system", "gpu-operator"
PR = ("kgwe.nvidia.io", "v1", SYSTEM_NS, "policyrepositories")


def budget_yaml(namespace: str, gpus: int = 8) -> str:
    return f"""apiVersion: kgwe.nvidia.io/v1
kind: GPUBudget
metadata:
  name: team-{namespace}
spec:
  team: research
  namespaces: [{namespace}]
  period: Monthly
  limit: {{amount: "1000", currency: USD}}
  quota:
    nvidia.com/gpu: {gpus}
"""


def gone(e2e) -> bool:
    try:
        e2e.obj()
    except ApiException as exc:
        return exc.status == 404
    return False


def exists(read) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def release_until(rec: RepositoryReconciler, e2e, done, timeout_seconds: float = 90.0, on_pass=None):
    """Reconcile the deleted repository pass after pass until `done()`; the outcomes seen."""
    outcomes = []
    deadline = time.monotonic() + timeout_seconds
    while not done():
        assert time.monotonic() < deadline, f"the way out did not get there: {outcomes[-3:]}"
        outcomes.append(rec.reconcile())
        if on_pass:
            on_pass(outcomes[-1])
        time.sleep(0.2)
    return outcomes


def test_deleted_mid_rollout_with_git_gone_every_node_goes_back_once_and_busy_ones_when_free(
    k8s_api, e2e, kgwe_mig_manager
):
    nodes = e2e.make_nodes(3)
    e2e.remote.commit({**e2e.base, "policy/budget.yaml": budget_yaml(e2e.namespace)})
    e2e.make_repository()
    rec = reconciler(k8s_api, e2e)
    drive(rec, ready)
    assert POLICY_REPOSITORY_FINALIZER in e2e.obj()["metadata"]["finalizers"], "added on its first pass"
    first = {n: e2e.labels(n)[MIG_CONFIG_LABEL] for n in nodes}
    assert all(c.startswith("kgwe-") for c in first.values()), first
    quota = lambda: e2e.core.read_namespaced_resource_quota(BUDGET_QUOTA_NAME, e2e.namespace)  # noqa: E731
    assert quota().spec.hard == {"requests.nvidia.com/gpu": "8"}

    # a pod holds nodes[2]'s GPUs; a new layout starts on nodes[0], whose MIG manager now takes its time
    e2e.core.create_namespaced_pod(e2e.namespace, gpu_pod("busy", nodes[2]))
    kgwe_mig_manager.delay_seconds = 3.0
    e2e.remote.commit({"policy/mig.yaml": e2e.strategy_yaml(e2e.pool, "3g.40gb: 100%")}, "new layout")
    with LabelRecorder(e2e.core, e2e.pool) as recorder:
        outcome = rec.reconcile()
        assert outcome.phase == "progressing"
        applying = [n for n in nodes if e2e.labels(n).get(MIG_CONFIG_LABEL) != first[n]]
        assert applying == [nodes[0]] and e2e.labels(nodes[0]).get(MIG_STATE_LABEL) != "success"

        # deleted mid-rollout, its Git server gone: the way out needs nothing but the cluster
        e2e.custom.patch_namespaced_custom_object(
            *PR, e2e.pool, {"spec": {"url": "https://127.0.0.1:1/gone.git"}}
        )
        generation = e2e.obj()["metadata"]["generation"]
        applies_before = len(kgwe_mig_manager.applies)
        e2e.custom.delete_namespaced_custom_object(*PR, e2e.pool)
        assert e2e.obj()["metadata"]["generation"] > generation  # what wakes the controller's loop at once
        outcome = rec.reconcile()
        assert outcome.phase == "releasing", outcome
        ready_condition = condition(e2e.status(), "Ready")
        assert (ready_condition["status"], ready_condition["reason"]) == ("False", "Releasing")
        assert condition(e2e.status(), "Reconciling")["reason"] == "Releasing"
        assert "deletionPolicy Delete" in ready_condition["message"], ready_condition
        assert not exists(quota), "the budget quota goes at once"
        assert not exists(lambda: e2e.core.read_namespaced_config_map("kgwe-scoring", SYSTEM_NS))
        assert exists(lambda: e2e.core.read_namespaced_config_map("kgwe-mig-parted-config", MIG_NS))
        assert e2e.labels(nodes[0])[MIG_CONFIG_LABEL] != MIG_ALL_DISABLED, (
            "never while its MIG manager applies"
        )

        ended: list[str] = []

        def the_idle_nodes_back(outcome) -> None:
            """Once the idle nodes are back, the busy one still waits, saying so; then its pod ends."""
            idle = [e2e.labels(n) for n in nodes[:2]]
            if (
                outcome is None
                or ended
                or not all(
                    labels.get(MIG_STATE_LABEL) == "success" and labels[MIG_CONFIG_LABEL] == MIG_ALL_DISABLED
                    for labels in idle
                )
            ):
                return
            status = e2e.status()
            assert status["rollout"][MIG_POOL]["waitingBusy"] == [nodes[2]], json.dumps(status["rollout"])
            assert f"stays until their GPUs are free on {nodes[2]}" in condition(status, "Ready")["message"]
            assert e2e.labels(nodes[2])[MIG_CONFIG_LABEL] == first[nodes[2]], "busy: it keeps its label"
            with contextlib.suppress(ApiException):
                e2e.core.delete_namespaced_pod("busy", e2e.namespace, grace_period_seconds=0)
            ended.append("busy")

        release_until(rec, e2e, lambda: gone(e2e), on_pass=the_idle_nodes_back, timeout_seconds=120)
    for n in nodes:
        labels, annotations = e2e.labels(n), e2e.core.read_node(n).metadata.annotations or {}
        assert labels[MIG_CONFIG_LABEL] == MIG_ALL_DISABLED and labels[MIG_STATE_LABEL] == "success"
        assert not {REQUESTED_AT_ANNOTATION, ROLLOUT_REVISION_ANNOTATION, REVISION_ANNOTATION} & set(
            annotations
        )
        assert (
            recorder.changes[n][-1] == MIG_ALL_DISABLED and recorder.changes[n].count(MIG_ALL_DISABLED) == 1
        )
    assert recorder.in_flight_peak <= 1, "maxUnavailable 1 on the way out too"
    assert len(recorder.changes[nodes[0]]) == 2, recorder.changes  # its new layout, then all-disabled
    applied = [(node, config) for node, config in kgwe_mig_manager.applies[applies_before:] if node in nodes]
    assert sorted(applied) == [(n, MIG_ALL_DISABLED) for n in nodes], (
        "each GPU repartitioned once on the way out"
    )
    assert not exists(lambda: e2e.core.read_namespaced_config_map("kgwe-mig-parted-config", MIG_NS))
    events = e2e.core.list_namespaced_event(SYSTEM_NS, field_selector=f"involvedObject.name={e2e.pool}").items
    assert {"Releasing", "Released"} <= {e.reason for e in events}


def test_retain_keeps_the_policy_in_force_and_lifts_only_the_cap_and_the_drains_cordon(k8s_api, e2e):
    nodes = e2e.make_nodes(2)
    blocked = {**gpu_pod("guarded", nodes[0]), "metadata": {"name": "guarded", "labels": {"app": "guarded"}}}
    e2e.core.create_namespaced_pod(e2e.namespace, blocked)
    client.PolicyV1Api(k8s_api).create_namespaced_pod_disruption_budget(
        e2e.namespace,
        {
            "metadata": {"name": "guarded"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    strategy = e2e.strategy_yaml(e2e.pool, max_unavailable="2", drain=True)
    e2e.remote.commit(
        {**e2e.base, "policy/mig.yaml": strategy, "policy/budget.yaml": budget_yaml(e2e.namespace)}
    )
    e2e.make_repository()

    def exhausted(repository, policy, pods, record):  # the cost duties' Enforce decision, spent already
        return {e2e.namespace: {"requests.nvidia.com/gpu": "0"}}

    rec = RepositoryReconciler(
        k8s_api, SYSTEM_NS, e2e.pool, cache_dir=e2e.tmp / "cache-retain", budget_caps=exhausted
    )
    for _ in range(3):
        rec.reconcile()
    quota = e2e.core.read_namespaced_resource_quota(BUDGET_QUOTA_NAME, e2e.namespace)
    assert quota.spec.hard == {"requests.nvidia.com/gpu": "0"}
    assert json.loads(quota.metadata.annotations[UNCAPPED_HARD_ANNOTATION]) == {
        "requests.nvidia.com/gpu": "8"
    }
    node = e2e.core.read_node(nodes[0])
    assert node.spec.unschedulable and CORDONED_ANNOTATION in node.metadata.annotations, (
        "a drain the PDB holds"
    )
    labels = {n: e2e.labels(n)[MIG_CONFIG_LABEL] for n in nodes}

    e2e.custom.patch_namespaced_custom_object(*PR, e2e.pool, {"spec": {"deletionPolicy": "Retain"}})
    e2e.custom.delete_namespaced_custom_object(*PR, e2e.pool)
    assert rec.reconcile() is None and gone(e2e), "released in one pass"
    quota = e2e.core.read_namespaced_resource_quota(BUDGET_QUOTA_NAME, e2e.namespace)
    assert quota.spec.hard == {"requests.nvidia.com/gpu": "8"}
    assert UNCAPPED_HARD_ANNOTATION not in (quota.metadata.annotations or {})
    node = e2e.core.read_node(nodes[0])
    assert not node.spec.unschedulable and CORDONED_ANNOTATION not in (node.metadata.annotations or {})
    assert {n: e2e.labels(n)[MIG_CONFIG_LABEL] for n in nodes} == labels, "labels stay as they were"
    assert e2e.core.read_namespaced_pod("guarded", e2e.namespace).metadata.deletion_timestamp is None
    assert exists(lambda: e2e.core.read_namespaced_config_map("kgwe-mig-parted-config", MIG_NS))
    assert exists(lambda: e2e.core.read_namespaced_config_map("kgwe-scoring", SYSTEM_NS))


def test_a_shared_node_goes_back_unshared_then_loses_the_label_and_the_configmap_goes_last(
    k8s_api, e2e, gpu_node
):
    from kgwe.localcluster.deviceplugin import DevicePluginStandIn
    from tests.reconcile.test_sharing_e2e import CONFIG_LABEL, sharing_yaml

    node = gpu_node("L40S-8-PCIE", name=f"{e2e.pool}-l0", labels={"kgwe.nvidia.io/pool": e2e.pool})
    e2e.remote.commit({"policy/sharing.yaml": sharing_yaml(e2e.pool), "policy/scoring.yaml": e2e.SCORING})
    e2e.make_repository()
    rec = reconciler(k8s_api, e2e)
    cm = lambda: e2e.core.read_namespaced_config_map("kgwe-device-plugin-config", MIG_NS)  # noqa: E731
    with DevicePluginStandIn(k8s_api, delay_seconds=0.3):
        drive(rec, ready)
        assert (
            e2e.labels(node)[CONFIG_LABEL].startswith("kgwe-")
            and e2e.labels(node)["nvidia.com/gpu.replicas"] == "4"
        )
        e2e.custom.delete_namespaced_custom_object(*PR, e2e.pool)
        seen: list[str | None] = []

        def record(outcome) -> None:
            seen.append(e2e.labels(node).get(CONFIG_LABEL))
            if exists(cm):  # the ConfigMap outlives every label naming one of its configs
                return
            assert CONFIG_LABEL not in e2e.labels(node)

        release_until(rec, e2e, lambda: gone(e2e), on_pass=record)
    labels = e2e.labels(node)
    assert CONFIG_LABEL not in labels and labels["nvidia.com/gpu.replicas"] == "1", "back to unshared"
    assert "default" in seen, "through the device plugin's default config, then away"
    assert not exists(cm)
    annotations = e2e.core.read_node(node).metadata.annotations or {}
    assert not {k for k in annotations if k.startswith("kgwe.nvidia.io/device-plugin")}
