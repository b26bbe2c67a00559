"""Pure parts of the reconciler: kstatus conditions, durations, webhook filtering."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kgwe.policy.types import parse_positive_duration
from kgwe.reconcile.desired import max_unavailable_value
from kgwe.reconcile.status import Outcome, condition, next_status

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def test_ready_then_progressing_then_stalled_conditions():
    ready = next_status(
        None,
        Outcome("ready", "applied main@sha1:a", "main@sha1:a", "main@sha1:a", [], {}),
        generation=3,
        now=T0,
    )
    assert condition(ready, "Ready") == {
        "type": "Ready",
        "status": "True",
        "reason": "ReconciliationSucceeded",
        "message": "applied main@sha1:a",
        "observedGeneration": 3,
        "lastTransitionTime": "2026-11-22T12:00:00Z",
    }
    assert condition(ready, "Reconciling") is None and condition(ready, "Stalled") is None
    assert ready["lastAppliedRevision"] == "main@sha1:a" and ready["observedGeneration"] == 3

    # Same status again later: lastTransitionTime is kept (no spurious status writes).
    again = next_status(
        ready,
        Outcome("ready", "applied main@sha1:a", "main@sha1:a", "main@sha1:a", [], {}),
        generation=3,
        now=T0 + timedelta(minutes=5),
    )
    assert again == ready

    rolling = next_status(
        ready,
        Outcome("progressing", "rolling", "main@sha1:b", "main@sha1:b"),
        generation=4,
        now=T0 + timedelta(minutes=6),
    )
    assert condition(rolling, "Ready")["status"] == "Unknown"
    assert condition(rolling, "Reconciling")["reason"] == "Progressing"
    assert rolling["inventory"] == [] and rolling["rollout"] == {}  # kept from before

    stalled = next_status(
        rolling,
        Outcome("stalled", "pool p: failed on n1", "main@sha1:b", "main@sha1:b"),
        generation=4,
        now=T0 + timedelta(minutes=7),
    )
    assert condition(stalled, "Stalled")["status"] == "True"
    assert "n1" in condition(stalled, "Ready")["message"]
    assert condition(stalled, "Reconciling") is None


def test_invalid_revision_keeps_last_applied():
    ok = next_status(None, Outcome("ready", "ok", "main@sha1:a", "main@sha1:a"), generation=1, now=T0)
    bad = next_status(
        ok, Outcome("invalid", "mig.yaml:3:5: bad", attempted_revision="main@sha1:b"), generation=1, now=T0
    )
    assert bad["lastAppliedRevision"] == "main@sha1:a" and bad["lastAttemptedRevision"] == "main@sha1:b"
    ready = condition(bad, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "ValidationFailed"
    assert "mig.yaml:3:5" in ready["message"]
    fetch = next_status(bad, Outcome("fetch_failed", "timeout"), generation=1, now=T0)
    assert condition(fetch, "Reconciling")["reason"] == "ProgressingWithRetry"


@pytest.mark.parametrize(("text", "seconds"), [("1m", 60), ("30s", 30), ("1h30m", 5400), ("500ms", 0.5)])
def test_durations(text, seconds):
    assert parse_positive_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "5", 7, "1x", "m1", "-1s", "0s"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_positive_duration(text)


def test_max_unavailable_forms():
    from decimal import Decimal

    assert max_unavailable_value(2) == 2
    assert max_unavailable_value(Decimal("25")) == "25%"
    assert max_unavailable_value("10%") == "10%"


def test_reports_only_pushes_do_not_trigger(tmp_path):
    from kgwe.gitops.webhook import PushEvent
    from kgwe.reconcile.controller import Controller

    c = Controller(None, "ns", cache_dir=tmp_path, listen=None, leader_election=False, workloads=False)
    routed: list[frozenset[str]] = []
    c.repositories.push = routed.append  # type: ignore[method-assign]  # where on_push hands a push on
    repo = frozenset({"git.example.com/p/policy"})
    c.on_push(PushEvent("refs/heads/main", "a" * 40, "push", ("reports/prod/chargeback.md",), repo))
    assert routed == []
    c.on_push(
        PushEvent("refs/heads/main", "a" * 40, "push", ("reports/x.md", "clusters/prod/mig.yaml"), repo)
    )
    assert routed == [repo]
    text = c.metrics.exposition().decode()
    assert 'kgwe_webhook_events_total{outcome="ignored_reports_only"} 1.0' in text


def test_equivalent_config_names_are_not_a_change():
    from kgwe.cluster.inventory import GpuNodeFacts
    from kgwe.reconcile.desired import Desired, _same_or

    configs = {
        "all-disabled": [{"devices": "all", "mig-enabled": False, "mig-devices": {}}],
        "kgwe-all-disabled": [{"devices": "all", "mig-enabled": False, "mig-devices": {}}],
        "kgwe-all-7x1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "custom-7x1g": [
            {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
            {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        ],
    }

    def facts(current: str, gpus: int = 2) -> GpuNodeFacts:
        return GpuNodeFacts("n", {"nvidia.com/mig.config": current}, {}, gpus, "p", None, False)

    def desired(wanted: str) -> Desired:
        return Desired([], {"n": wanted}, {}, {"n": "pool"}, {}, configs)

    assert _same_or(desired("kgwe-all-disabled"), facts("all-disabled")) == "all-disabled"
    assert _same_or(desired("kgwe-all-7x1g.10gb"), facts("all-disabled")) == "kgwe-all-7x1g.10gb"
    assert _same_or(desired("kgwe-all-7x1g.10gb"), facts("custom-7x1g")) == "custom-7x1g"  # same on 2 GPUs
    assert _same_or(desired("kgwe-all-7x1g.10gb"), facts("custom-7x1g", gpus=3)) == "kgwe-all-7x1g.10gb"
    assert _same_or(desired("kgwe-all-7x1g.10gb"), facts("unknown-config")) == "kgwe-all-7x1g.10gb"
