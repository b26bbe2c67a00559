"""The sharing rollout decision on plain node facts: the MIG gates, with GFD's labels as the node's state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import yaml

from kgwe.cluster.inventory import GpuNodeFacts
from kgwe.policy.sharing_strategy import GPUSharingStrategy
from kgwe.reconcile.rollout import plan_rollout
from kgwe.reconcile.sharing_rollout import _progress, pool_policies, sharing_node_states
from kgwe.render.sharing import config_key
from kgwe.timestamps import format_rfc3339 as format_time
from kgwe.vocab import SHARING_CORDONED_ANNOTATION, SHARING_REQUESTED_AT_ANNOTATION

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def strategy(max_unavailable: int | str = 1, drain: bool = False, replicas: int = 4) -> GPUSharingStrategy:
    """The pool's strategy (the default one's config key is CONFIG)."""
    return GPUSharingStrategy.model_validate(
        yaml.safe_load(
            f"""
            apiVersion: kgwe.nvidia.io/v1
            kind: GPUSharingStrategy
            metadata: {{name: notebooks}}
            spec:
              nodeSelector: {{pool: notebooks}}
              mode: TimeSlicing
              replicas: {replicas}
              rollout: {{maxUnavailable: {max_unavailable}, drain: {str(drain).lower()}, pendingTimeout: 5m}}
            """
        )
    )


CONFIG = config_key(strategy())


def node(
    name: str,
    config: str | None = None,
    replicas: int | None = None,
    busy: int = 0,
    requested: datetime | None = None,
    cordoned: bool = False,
    pool: str = "notebooks",
) -> GpuNodeFacts:
    labels = {"pool": pool, "nvidia.com/gpu.count": "8"}
    if config:
        labels["nvidia.com/device-plugin.config"] = config
    if replicas:
        labels["nvidia.com/gpu.replicas"] = str(replicas)
        labels["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
    annotations = {}
    if requested:
        annotations[SHARING_REQUESTED_AT_ANNOTATION] = format_time(requested)
    if cordoned:
        annotations[SHARING_CORDONED_ANNOTATION] = CONFIG
    return GpuNodeFacts(
        name=name,
        labels=labels,
        annotations=annotations,
        gpus=8,
        product="NVIDIA-L40S",
        topology=None,
        unschedulable=cordoned,
        gpu_pods=[f"ns/p{i}" for i in range(busy)],
    )


def decide(facts, s=None, now=NOW, device_plugins=None):
    s = s or strategy()
    plan = plan_rollout(sharing_node_states([s], facts), pool_policies([s]), now)
    return plan, {name: _progress(p, device_plugins or {}) for name, p in plan.pools.items()}


def test_idle_nodes_switch_at_most_max_unavailable_at_a_time_busy_ones_wait():
    plan, pools = decide([node("a"), node("b"), node("c", busy=2), node("other", pool="training")])
    assert [(a.kind, a.node, a.config) for a in plan.actions] == [("relabel", "a", CONFIG)]
    progress = pools["sharing/notebooks"]
    assert progress.total == 3 and progress.waiting_busy == ["c"]
    plan, _ = decide([node("a"), node("b"), node("c")], strategy(max_unavailable=2))
    assert [a.node for a in plan.actions] == ["a", "b"]


def test_a_node_is_in_flight_until_gfd_reports_the_asked_sharing():
    relabelled = node("a", CONFIG, requested=NOW - timedelta(seconds=30))
    plan, pools = decide([relabelled, node("b")])
    assert plan.actions == () and pools["sharing/notebooks"].in_progress == ["a"]  # b waits its turn
    wrong_replicas = node("a", CONFIG, replicas=2, requested=NOW - timedelta(seconds=30))
    assert decide([wrong_replicas, node("b")])[0].actions == ()
    done = node("a", CONFIG, replicas=4, requested=NOW - timedelta(seconds=30))
    plan, pools = decide([done, node("b")])
    assert pools["sharing/notebooks"].done == ["a"] and [a.node for a in plan.actions] == ["b"]


def test_a_switching_node_whose_nvidia_plugin_does_not_run_says_why():
    """config-manager refused the node's key (its container restarts): the pool's progress names it while
    the node waits, and after the timeout too; a plugin that runs, or one on a node not switching, is not
    named."""
    refused = "config-manager: CrashLoopBackOff (restarts 3): specified config kgwe-x does not exist"
    plugins = {"a": refused, "b": refused, "c": "Running"}
    waiting = node("a", CONFIG, requested=NOW - timedelta(seconds=30))
    _, pools = decide(
        [waiting, node("b"), node("c", CONFIG, requested=NOW - timedelta(seconds=30))], device_plugins=plugins
    )
    progress = pools["sharing/notebooks"]
    assert progress.device_plugins == {"a": refused}
    assert progress.message().endswith(f"; NVIDIA's device plugin on a: {refused}")
    late = node("a", CONFIG, requested=NOW - timedelta(minutes=6))
    _, pools = decide([late], device_plugins=plugins)
    assert (
        "in time on a" in pools["sharing/notebooks"].message()
        and refused in pools["sharing/notebooks"].message()
    )


def test_a_node_that_never_reports_stalls_its_pool_with_a_device_plugin_message():
    late = node("a", CONFIG, requested=NOW - timedelta(minutes=6))
    plan, pools = decide([late, node("b")])
    progress = pools["sharing/notebooks"]
    assert plan.actions == () and progress.stopped and progress.timed_out == ["a"]
    assert "device plugin did not report the new sharing in time on a" in progress.message()


def test_drain_cordons_and_evicts_a_busy_node_then_relabels_and_uncordons():
    s = strategy(drain=True)
    plan, _ = decide([node("a", busy=1)], s)
    assert [(a.kind, a.node) for a in plan.actions] == [("cordon", "a"), ("evict", "a")]
    plan, _ = decide([node("a", cordoned=True)], s)  # pods gone: switch it
    assert [(a.kind, a.config) for a in plan.actions] == [("relabel", CONFIG)]
    plan, _ = decide([node("a", CONFIG, replicas=4, cordoned=True, requested=NOW)], s)
    assert [a.kind for a in plan.actions] == ["uncordon"]


def test_a_node_no_strategy_selects_any_more_goes_back_to_default_under_the_gates():
    left = node("a", CONFIG, replicas=4, pool="training", requested=NOW - timedelta(hours=3))
    plan, pools = decide([left, node("x", "someone-elses-config", pool="training")])
    assert [(a.node, a.config) for a in plan.actions] == [("a", "default")]
    assert set(pools) == {"sharing/default"}  # a config KGWE did not write is left alone
    busy = node("a", CONFIG, replicas=4, pool="training", busy=1)
    assert decide([busy])[0].actions == ()


def test_a_node_sent_back_to_default_is_in_flight_until_gfd_reports_it_unshared():
    returning = node("a", "default", replicas=4, pool="training", requested=NOW - timedelta(seconds=30))
    plan, pools = decide([returning])
    assert plan.actions == () and pools["sharing/default"].in_progress == ["a"]
    settled = node("a", "default", pool="training", requested=NOW - timedelta(seconds=30))
    assert decide([settled])[1] == {}  # unshared: out of every pool
    someone_elses = node("b", "default", replicas=4, pool="training")  # not KGWE's relabel: left alone
    assert decide([someone_elses])[1] == {}


def test_a_switched_node_switches_again_when_its_strategy_changes():
    switched = node("a", CONFIG, replicas=4, requested=NOW - timedelta(hours=3))
    two = strategy(replicas=2)
    plan, _ = decide([switched, node("b", CONFIG, replicas=4, busy=1)], two)
    assert [(a.kind, a.node, a.config) for a in plan.actions] == [("relabel", "a", config_key(two))]
