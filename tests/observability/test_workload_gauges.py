"""The GPUWorkload gauges the dashboards read: every phase is present, and a namespace whose gangs are all
scheduled reports a wait of 0 (the panel shows "no wait", not "no data")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kgwe.observability.workloads import workload_stats

NOW = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)


def wl(ns: str, phase: str, scheduled: bool, admitted_minutes_ago: int = 10) -> dict:
    admitted = (NOW - timedelta(minutes=admitted_minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"namespace": ns, "creationTimestamp": admitted},
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Admitted", "status": "True", "lastTransitionTime": admitted},
                {"type": "PodsScheduled", "status": "True" if scheduled else "False"},
            ],
        },
    }


def test_gang_waits_per_namespace_with_zero_for_scheduled_gangs():
    phases, waits = workload_stats(
        [
            wl("a", "Running", scheduled=True),
            wl("b", "Pending", scheduled=False, admitted_minutes_ago=30),
            wl("b", "Running", scheduled=True),
            wl("c", "Succeeded", scheduled=True),
        ],
        NOW,
    )
    assert waits == {"a": 0.0, "b": 1800.0}
    assert phases["Running"] == 2 and phases["Pending"] == 1 and phases["Succeeded"] == 1
    assert phases["Failed"] == 0
