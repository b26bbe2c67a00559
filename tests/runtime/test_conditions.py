"""Conditions and the status patcher: one type, set in place with honest transition times, summed up in
kstatus's three; status written only when it changed, as a merge patch, keeping other writers' conditions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kgwe.policy.cluster_kinds import Condition
from kgwe.runtime import conditions
from kgwe.runtime.conditions import READY, RECONCILING, STALLED, Summary, set_condition, summarise
from kgwe.runtime.kinds import GPU_WORKLOAD
from kgwe.runtime.leader import NotLeader
from kgwe.runtime.memory import MemoryCluster
from kgwe.runtime.status import StatusPatcher, merge_diff

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_set_condition_moves_the_transition_time_only_when_the_status_flips():
    held: list[Condition] = []
    assert set_condition(held, "Admitted", "False", "Pending", "wait", generation=1, now=T0)
    assert not set_condition(
        held, "Admitted", "False", "Pending", "wait", generation=2, now=T0 + timedelta(1)
    )
    assert held[0].last_transition_time == "2026-11-01T00:00:00Z" and held[0].observed_generation == 2
    assert set_condition(held, "Admitted", "False", "Quota", "full", generation=2, now=T0 + timedelta(2))
    assert held[0].last_transition_time == "2026-11-01T00:00:00Z"  # same status, new reason
    assert set_condition(held, "Admitted", "True", "Admitted", "ok", generation=2, now=T0 + timedelta(3))
    assert held[0].last_transition_time == "2026-11-04T00:00:00Z"


def test_readers_take_models_and_the_api_s_dicts_alike():
    raw = {
        "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Failed", "status": "False"}]}
    }
    found = conditions.of(raw)
    assert conditions.is_true(found, "Ready") and not conditions.is_true(found, "Failed")
    assert conditions.status_of(found, "Failed") == "False" and conditions.find(found, "Nope") is None
    model = [Condition(type="Ready", status="Unknown")]
    assert conditions.status_of(model, "Ready") == "Unknown"
    assert conditions.of({"status": {"conditions": "garbage"}}) == []


def test_summarise_keeps_abnormal_true_conditions_only_while_true():
    failing = summarise(
        [],
        Summary("False", "GitOperationFailed", reconciling="ProgressingWithRetry"),
        "no",
        generation=3,
        now=T0,
    )
    assert [(c.type, c.status, c.reason) for c in failing] == [
        (READY, "False", "GitOperationFailed"),
        (RECONCILING, "True", "ProgressingWithRetry"),
    ]
    stalled = summarise(
        failing,
        Summary("False", "ValidationFailed", stalled="ValidationFailed"),
        "bad",
        generation=3,
        now=T0 + timedelta(1),
    )
    assert [c.type for c in stalled] == [READY, STALLED]
    assert stalled[0].last_transition_time == "2026-11-01T00:00:00Z"  # Ready stayed False
    ready = summarise(
        stalled, Summary("True", "ReconciliationSucceeded"), "ok", generation=4, now=T0 + timedelta(2)
    )
    assert [(c.type, c.status) for c in ready] == [(READY, "True")]
    assert ready[0].last_transition_time == "2026-11-03T00:00:00Z"


def test_merge_diff_turns_the_old_status_into_the_new():
    old = {"a": 1, "gone": 2, "nested": {"keep": 1, "drop": 2}, "list": [1, 2]}
    new = {"a": 1, "nested": {"keep": 1, "add": 3}, "list": [1]}
    assert merge_diff(old, new) == {"gone": None, "nested": {"drop": None, "add": 3}, "list": [1]}
    assert merge_diff(new, new) == {}


@pytest.fixture
def cluster() -> MemoryCluster:
    cluster = MemoryCluster()
    cluster.create(
        {
            "apiVersion": GPU_WORKLOAD.api_version,
            "kind": "GPUWorkload",
            "metadata": {"name": "w", "namespace": "ns"},
        }
    )
    foreign = {"type": "Audited", "status": "True", "reason": "Someone", "message": "else's"}
    cluster.patch_status(GPU_WORKLOAD, "w", {"status": {"conditions": [foreign], "phase": "Pending"}}, "ns")
    return cluster


def test_the_patcher_writes_only_changes_and_keeps_conditions_it_does_not_own(cluster):
    patcher = StatusPatcher(cluster, GPU_WORKLOAD, owned={"Admitted"})
    live = cluster.get(GPU_WORKLOAD, "w", "ns")
    mine = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "run 0"}
    assert patcher.write(live, {"phase": "Running", "conditions": [mine], "nodes": None})
    after = cluster.get(GPU_WORKLOAD, "w", "ns")
    assert after["status"]["phase"] == "Running" and "nodes" not in after["status"]
    assert [c["type"] for c in after["status"]["conditions"]] == ["Admitted", "Audited"]
    assert not patcher.write(after, {"phase": "Running", "conditions": [mine]})  # nothing changed
    assert patcher.writes == 1
    closed = StatusPatcher(cluster, GPU_WORKLOAD, owned={"Admitted"}, gate=lambda: False)
    with pytest.raises(NotLeader):
        closed.write(after, {"phase": "Failed", "conditions": [mine]})
    assert cluster.get(GPU_WORKLOAD, "w", "ns")["status"]["phase"] == "Running"
