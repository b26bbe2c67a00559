"""Offline replays of the controller's MIG decisions on sample-repo's DGX H100 pool: the same planning
(`RepositoryReconciler.desired`, with the live ConfigMap kept in memory) and the same rollout decision as on a
cluster, with a toy MIG manager that takes a random number of reconciles per apply and busy nodes whose jobs
end at random times. The planner must see each node's true layout — mid-apply nodes at their target, hashed
config names decoded from the ConfigMap — and keep nodes already changed for the revision where they are."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from kgwe.cluster.inventory import facts_from_objects, inventory_document
from kgwe.reconcile.desired import node_states
from kgwe.reconcile.rollout import plan_rollout, resolve_max_unavailable
from kgwe.timestamps import format_rfc3339 as format_time
from kgwe.vocab import (
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    REQUESTED_AT_ANNOTATION,
    ROLLOUT_REVISION_ANNOTATION,
)

START = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.fixture
def policy(sample_policy):
    return sample_policy


def h100_nodes(ps) -> list[dict]:
    inventory = ps.inventory()
    nodes = []
    for node in inventory.spec.nodes:
        if node.labels.get("gpu.nvidia.com/class") != "H100":
            continue
        labels = {**node.labels, "nvidia.com/gpu.present": "true", MIG_CONFIG_LABEL: "all-disabled"}
        labels[MIG_STATE_LABEL] = "success"
        nodes.append({"metadata": {"name": node.name, "labels": labels, "annotations": {}}, "spec": {}})
    return nodes


def whole_gpu_pod(node: str) -> dict:
    return {
        "metadata": {"name": f"job-{node}", "namespace": "ml"},
        "spec": {"nodeName": node, "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }


def rendered_configs(objects: list[dict]) -> dict:
    for obj in objects:
        if obj.get("kind") == "ConfigMap" and obj["metadata"]["name"] == "kgwe-mig-parted-config":
            return yaml.safe_load(obj["data"]["config.yaml"])["mig-configs"]
    raise AssertionError("no mig-parted ConfigMap rendered")


def replay(offline, ps, seed: int, busy: int, max_steps: int = 80) -> dict[str, list[str]]:
    rng = random.Random(seed)
    nodes = {n["metadata"]["name"]: n for n in h100_nodes(ps)}
    pods = {name: [whole_gpu_pod(name)] for name in sorted(nodes)[:busy]}
    applying: dict[str, int] = {}  # node -> reconciles until the toy MIG manager reports success
    configmap: dict = {}
    relabels: dict[str, list[str]] = {}
    now = START
    for _ in range(max_steps):
        facts = facts_from_objects(list(nodes.values()), pods)
        desired = offline(configmap).desired(ps, facts)
        # sync: the ConfigMap is applied before any label may name one of its new configs
        configmap = rendered_configs(desired.objects)
        for name, node in nodes.items():
            assert node["metadata"]["labels"][MIG_CONFIG_LABEL] in configmap, (
                f"{name}: label not in ConfigMap"
            )
        states = node_states(desired, facts)
        plan = plan_rollout(states, desired.pools, now)
        for action in plan.actions:
            assert action.kind == "relabel", action  # drain is off in sample-repo
            meta = nodes[action.node]["metadata"]
            assert meta["labels"].get(MIG_STATE_LABEL) not in ("pending", None), f"{action.node} mid-apply"
            assert action.config in configmap, f"{action.node} labelled {action.config}, not in the ConfigMap"
            meta["labels"][MIG_CONFIG_LABEL] = action.config
            meta["labels"].pop(MIG_STATE_LABEL, None)
            meta["annotations"][REQUESTED_AT_ANNOTATION] = format_time(now)
            meta["annotations"][ROLLOUT_REVISION_ANNOTATION] = desired.revisions[
                desired.node_pool[action.node]
            ]
            relabels.setdefault(action.node, []).append(action.config)
            applying[action.node] = rng.randint(1, 4)
        pool = desired.pools["inference-h100"]
        limit = resolve_max_unavailable(pool.max_unavailable, len(nodes))
        in_flight = sum(
            1 for n in nodes.values() if n["metadata"]["labels"].get(MIG_STATE_LABEL) != "success"
        )
        assert in_flight <= limit, f"{in_flight} nodes in flight, maxUnavailable {limit}"
        if all(p.complete for p in plan.pools.values()) and not applying and not pods:
            return relabels
        # the toy MIG manager and the jobs move on
        for name in list(applying):
            labels = nodes[name]["metadata"]["labels"]
            labels[MIG_STATE_LABEL] = "pending"
            applying[name] -= 1
            if applying[name] <= 0:
                labels[MIG_STATE_LABEL] = "success"
                del applying[name]
        for name in list(pods):
            if rng.random() < 0.15:
                del pods[name]
        now += timedelta(seconds=30)
    raise AssertionError(f"rollout did not finish; relabels so far: {relabels}")


@pytest.mark.parametrize(("seed", "busy"), [(1, 0), (2, 1), (3, 2), (4, 3), (5, 3)])
def test_each_node_is_relabelled_once_per_revision(offline_reconciler, policy, seed, busy):
    relabels = replay(offline_reconciler, policy, seed, busy)
    twice = {n: c for n, c in relabels.items() if len(c) > 1}
    assert not twice, f"relabelled more than once in one revision: {twice}"
    assert relabels, "the sample pool needs a change"


def test_mid_apply_node_is_planned_at_its_target_even_with_a_hashed_config(offline_reconciler, policy):
    """A node the MIG manager is applying a `kgwe-<hash>` config to counts with that config's layout."""
    nodes = h100_nodes(policy)
    facts = facts_from_objects(nodes, {})
    desired = offline_reconciler({}).desired(policy, facts)
    configs = rendered_configs(desired.objects)
    node, config = next(
        (n, c) for n, c in sorted(desired.node_configs.items()) if not c.startswith("kgwe-all-")
    )
    for raw in nodes:
        if raw["metadata"]["name"] == node:
            raw["metadata"]["labels"][MIG_CONFIG_LABEL] = config
            raw["metadata"]["labels"][MIG_STATE_LABEL] = "pending"
    doc = inventory_document(facts_from_objects(nodes, {}), mig_configs=configs)
    entry = next(n for n in doc["spec"]["nodes"] if n["name"] == node)
    assert entry["migConfigState"] == "pending"
    mig = [d.get("mig") for d in entry.get("devices", [])]
    assert len(mig) == entry["gpus"] and all(m for m in mig), f"{node} seen as {mig}, not as {config}"
