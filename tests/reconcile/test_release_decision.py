"""The offboarding decision (kgwe.reconcile.release) on plain data: what a deleted PolicyRepository's way
out writes next, under the rollout's safety rules — never a node whose GPUs are held, never one whose MIG
manager is applying, at most maxUnavailable in flight, nothing evicted, a failed node stopping it, the GPU
Operator's ConfigMaps kept while a node names one of their configs — and, over random sequences of pods
ending and MIG managers reporting, every node given back exactly once and the finalizer released."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kgwe.reconcile.release import (
    MIG_POOL,
    SHARING_POOL,
    Key,
    LiveObject,
    NodeView,
    Written,
    deletion_policy,
    plan_release,
    uncapped_hard,
)
from kgwe.vocab import (
    CORDONED_ANNOTATION,
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_REPLICAS_LABEL,
    GPU_SHARING_STRATEGY_LABEL,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    PRUNE_ANNOTATION,
    REPOSITORY_LABEL,
    REQUESTED_AT_ANNOTATION,
    RETRY_ANNOTATION,
    REVISION_ANNOTATION,
    ROLLOUT_REVISION_ANNOTATION,
    SHARING_CORDONED_ANNOTATION,
    SHARING_REQUESTED_AT_ANNOTATION,
    UNCAPPED_HARD_ANNOTATION,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
EARLIER = (NOW - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
REPO = "kgwe-system.gpu-policy"
MIG_CM = Key("v1", "ConfigMap", "gpu-operator", "kgwe-mig-parted-config")
DP_CM = Key("v1", "ConfigMap", "gpu-operator", "kgwe-device-plugin-config")
QUOTA = Key("v1", "ResourceQuota", "ml-training", "kgwe-budget")
SCORING = Key("v1", "ConfigMap", "kgwe-system", "kgwe-scoring")


def ours(key: Key, **annotations: str) -> LiveObject:
    return LiveObject(key, True, {REPOSITORY_LABEL: REPO}, annotations)


def mig_node(
    name: str, config: str = "kgwe-7x1g", state: str | None = "success", pods: int = 0, **ann
) -> NodeView:
    labels = {MIG_CONFIG_LABEL: config} | ({MIG_STATE_LABEL: state} if state else {})
    marks = {
        REQUESTED_AT_ANNOTATION: EARLIER,
        ROLLOUT_REVISION_ANNOTATION: "pool.abc",
        REVISION_ANNOTATION: "r",
    }
    return NodeView(name, labels, marks | ann, pods)


def written(nodes, objects=None, rollout=None) -> Written:
    return Written(
        REPO,
        objects if objects is not None else [ours(MIG_CM), ours(DP_CM), ours(QUOTA), ours(SCORING)],
        nodes,
        MIG_CM,
        DP_CM,
        rollout or {},
    )


def test_deletion_policy_defaults_to_delete_and_refuses_other_words():
    assert deletion_policy({}) == "Delete"
    assert deletion_policy({"deletionPolicy": "Retain"}) == "Retain"
    assert deletion_policy({"deletionPolicy": "Orphan"}) is None


def test_delete_gives_idle_nodes_back_one_at_a_time_and_keeps_busy_ones_labelled():
    nodes = [mig_node("a"), mig_node("b"), mig_node("busy", pods=2)]
    plan = plan_release(written(nodes), "Delete", NOW)
    assert [(a.kind, a.node, a.config) for a in plan.mig] == [
        ("relabel", "a", "all-disabled")
    ]  # maxUnavailable 1
    pool = plan.pools[MIG_POOL]
    assert pool.waiting_busy == ["busy"] and not plan.finished
    assert "nvidia.com/mig.config stays until their GPUs are free on busy" in plan.message()
    # the GPU Operator's ConfigMaps stay while a node names one of their configs; the rest goes at once
    assert set(plan.delete) == {QUOTA, SCORING, DP_CM}
    assert not plan.forget and not plan.uncordon_mig


def test_a_node_the_mig_manager_is_applying_is_waited_for_never_relabelled():
    nodes = [mig_node("mid", "kgwe-2x3g", state="pending"), mig_node("b")]
    plan = plan_release(written(nodes), "Delete", NOW)
    assert plan.mig == []  # mid counts against maxUnavailable 1 and keeps its target
    assert plan.pools[MIG_POOL].in_progress == ["mid"]
    assert "in progress on mid" in plan.message()


def test_a_drain_in_progress_is_given_up_and_nothing_is_evicted():
    node = mig_node("draining", pods=1, **{CORDONED_ANNOTATION: "kgwe-2x3g"})
    plan = plan_release(written([node]), "Delete", NOW)
    assert plan.uncordon_mig == ["draining"]
    assert all(a.kind in ("relabel", "acknowledge") for a in plan.mig) and plan.mig == []
    assert plan.pools[MIG_POOL].waiting_busy == ["draining"]


def test_nodes_back_at_all_disabled_lose_kgwes_marks_and_then_the_configmaps_go():
    back = [mig_node("a", "all-disabled"), mig_node("b", "all-disabled")]
    plan = plan_release(written(back), "Delete", NOW)
    assert plan.finished and plan.message() == "released (deletionPolicy Delete)"
    assert plan.forget["a"] == (REQUESTED_AT_ANNOTATION, ROLLOUT_REVISION_ANNOTATION, REVISION_ANNOTATION)
    assert set(plan.delete) == {MIG_CM, DP_CM, QUOTA, SCORING}
    # not yet reported: the MIG manager is applying all-disabled, the ConfigMap that defines it stays
    applying = plan_release(written([mig_node("a", "all-disabled", state=None)]), "Delete", NOW)
    assert MIG_CM not in applying.delete and not applying.finished


def test_a_node_failing_on_the_way_out_stops_it_until_a_person_acknowledges():
    nodes = [mig_node("bad", "all-disabled", state="failed"), mig_node("b")]
    plan = plan_release(written(nodes), "Delete", NOW)
    assert plan.stalled and plan.mig == [] and not plan.finished
    assert "mig-retry=true" in plan.message()
    acked = plan_release(
        written(
            [replace(nodes[0], annotations={**nodes[0].annotations, RETRY_ANNOTATION: "true"}), nodes[1]]
        ),
        "Delete",
        NOW,
    )
    assert [(a.kind, a.node) for a in acked.mig] == [("acknowledge", "bad"), ("relabel", "b")]


def test_a_label_someone_else_set_since_is_left_and_only_kgwes_marks_go():
    node = mig_node("mine-once", "all-balanced")
    plan = plan_release(written([node]), "Delete", NOW)
    assert plan.mig == [] and plan.forget["mine-once"][0] == REQUESTED_AT_ANNOTATION and plan.finished


def test_nodes_of_another_repositorys_configmap_are_not_touched():
    other = LiveObject(MIG_CM, True, {REPOSITORY_LABEL: "kgwe-system.other"}, {})
    plan = plan_release(written([mig_node("a")], objects=[other, ours(QUOTA)]), "Delete", NOW)
    assert plan.mig == [] and not plan.forget and plan.delete == [QUOTA] and plan.finished


def test_the_gate_is_the_repositorys_smallest_pool_maxunavailable_and_stays_fixed():
    nodes = [mig_node(n) for n in "abcdef"]
    rollout = {
        "h100": {"maxUnavailable": 3},
        "a100": {"maxUnavailable": 2},
        "sharing/l40s": {"maxUnavailable": 1},
    }
    plan = plan_release(written(nodes, rollout=rollout), "Delete", NOW)
    assert len(plan.mig) == 2 and plan.pools[MIG_POOL].max_unavailable == 2
    later = {**rollout, MIG_POOL: plan.pools[MIG_POOL].as_status()}
    assert len(plan_release(written(nodes, rollout=later), "Delete", NOW).mig) == 2


def test_sharing_goes_back_to_default_then_the_label_goes_while_idle():
    shared = NodeView(
        "s", {DEVICE_PLUGIN_CONFIG_LABEL: "kgwe-l40s-4x-1234"}, {SHARING_REQUESTED_AT_ANNOTATION: EARLIER}
    )
    plan = plan_release(written([shared]), "Delete", NOW)
    assert [(a.kind, a.config) for a in plan.sharing] == [("relabel", "default")] and not plan.finished
    unshared = {GPU_REPLICAS_LABEL: "1", GPU_SHARING_STRATEGY_LABEL: "none"}
    idle = NodeView(
        "s", {DEVICE_PLUGIN_CONFIG_LABEL: "default", **unshared}, {SHARING_REQUESTED_AT_ANNOTATION: EARLIER}
    )
    plan = plan_release(written([idle]), "Delete", NOW)
    assert plan.unlabel_sharing == ["s"] and plan.forget["s"] == (SHARING_REQUESTED_AT_ANNOTATION,)
    assert DP_CM in plan.delete and plan.finished
    plan = plan_release(written([replace(idle, gpu_pods=1)]), "Delete", NOW)
    assert not plan.unlabel_sharing and DP_CM not in plan.delete
    assert "nvidia.com/device-plugin.config: stays until their GPUs are free on s" in plan.message()
    still_shared = replace(idle, labels={DEVICE_PLUGIN_CONFIG_LABEL: "default", GPU_REPLICAS_LABEL: "4",
                                         GPU_SHARING_STRATEGY_LABEL: "time-slicing"})  # fmt: skip
    assert plan_release(written([still_shared]), "Delete", NOW).pools[SHARING_POOL].in_progress == ["s"]


def test_retain_leaves_the_policy_in_force_and_lifts_only_caps_and_cordons():
    capped = ours(QUOTA, **{UNCAPPED_HARD_ANNOTATION: '{"requests.nvidia.com/gpu":"64"}'})
    nodes = [
        mig_node("a", pods=1, **{CORDONED_ANNOTATION: "x"}),
        NodeView("s", {}, {SHARING_CORDONED_ANNOTATION: "y"}),
    ]
    plan = plan_release(
        written(nodes, objects=[ours(MIG_CM), ours(DP_CM), capped, ours(SCORING)]), "Retain", NOW
    )
    assert plan.uncordon_mig == ["a"] and plan.uncordon_sharing == ["s"]
    assert [(u.key, dict(u.hard)) for u in plan.uncap] == [(QUOTA, {"requests.nvidia.com/gpu": "64"})]
    assert not (plan.mig or plan.sharing or plan.delete or plan.forget) and plan.finished


def test_protected_objects_stay_and_objects_gone_or_not_ours_are_left():
    protected = ours(SCORING, **{PRUNE_ANNOTATION: "disabled"})
    gone = LiveObject(Key("v1", "ConfigMap", "kgwe-system", "kgwe-runtimes"), present=False)
    foreign = LiveObject(QUOTA, True, {REPOSITORY_LABEL: "kgwe-system.other"}, {})
    plan = plan_release(written([], objects=[protected, gone, foreign]), "Delete", NOW)
    assert plan.kept == [SCORING] and plan.delete == [] and plan.finished


def test_an_uncapped_hard_annotation_that_is_not_kgwes_is_ignored():
    assert uncapped_hard({UNCAPPED_HARD_ANNOTATION: '{"requests.nvidia.com/gpu":"8"}'}) == {
        "requests.nvidia.com/gpu": "8"
    }
    for bad in ("[1]", '{"a": 1}', "not json", "{" + "x" * 5000):
        assert uncapped_hard({UNCAPPED_HARD_ANNOTATION: bad}) is None


@settings(max_examples=60, deadline=None)
@given(
    busy=st.lists(st.integers(0, 3), min_size=1, max_size=6),  # passes until each node's pods end
    states=st.lists(st.sampled_from(["success", "pending", None]), min_size=6, max_size=6),
    apply_passes=st.integers(0, 2),  # passes the MIG manager takes to report success
    gate=st.integers(1, 3),
)
def test_every_node_is_given_back_once_and_the_way_out_ends(busy, states, apply_passes, gate):
    nodes = {
        f"n{i}": mig_node(f"n{i}", f"kgwe-cfg{i % 2}", state=states[i], pods=1 if b else 0)
        for i, b in enumerate(busy)
    }
    pods_left = {f"n{i}": b for i, b in enumerate(busy)}
    applying: dict[str, int] = {
        n: apply_passes for n, v in nodes.items() if v.labels.get(MIG_STATE_LABEL) != "success"
    }
    relabels: dict[str, int] = {}
    objects = [ours(MIG_CM), ours(QUOTA)]
    for _ in range(60):
        plan = plan_release(
            written(list(nodes.values()), objects, {"p": {"maxUnavailable": gate}}), "Delete", NOW
        )
        in_flight = len([v for v in nodes.values() if v.labels.get(MIG_STATE_LABEL) != "success"])
        for action in plan.mig:
            node = nodes[action.node]
            assert action.kind == "relabel" and node.gpu_pods == 0, "only idle nodes are given back"
            assert node.labels.get(MIG_STATE_LABEL) == "success", "never while its MIG manager applies"
            relabels[action.node] = relabels.get(action.node, 0) + 1
            nodes[action.node] = replace(node, labels={MIG_CONFIG_LABEL: "all-disabled"})
            applying[action.node] = apply_passes
        assert in_flight + len(plan.mig) <= max(gate, in_flight), "at most maxUnavailable nodes in flight"
        if MIG_CM in plan.delete:
            assert all(v.labels.get(MIG_CONFIG_LABEL) == "all-disabled" for v in nodes.values())
            objects = [o for o in objects if o.key != MIG_CM]
        objects = [o for o in objects if o.key not in plan.delete]
        for name, keys in plan.forget.items():
            node = nodes[name]
            nodes[name] = replace(
                node, annotations={k: v for k, v in node.annotations.items() if k not in keys}
            )
        if plan.finished:
            break
        for name, node in list(nodes.items()):  # the world moves on: pods end, MIG managers report
            pods_left[name] = max(0, pods_left[name] - 1)
            labels = dict(node.labels)
            if name in applying:
                applying[name] -= 1
                if applying[name] < 0:
                    labels[MIG_STATE_LABEL] = "success"
                    del applying[name]
            nodes[name] = replace(node, labels=labels, gpu_pods=1 if pods_left[name] else 0)
    assert plan.finished, plan.message()
    assert all(count == 1 for count in relabels.values()), relabels
    assert all(v.labels[MIG_CONFIG_LABEL] == "all-disabled" for v in nodes.values())
    assert all(not v.annotations for v in nodes.values()), "no KGWE mark is left on a node"
