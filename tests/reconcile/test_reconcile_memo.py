"""What a reconcile keeps from the last one: a revision is loaded once per commit, the desired state is
planned once per (policy, node facts, live configs), and any change to those inputs plans again."""

from __future__ import annotations

import shutil
from pathlib import Path

import git
import pytest

from kgwe.cluster.inventory import facts_from_objects
from kgwe.gitops.source import GitRef, GitSource
from kgwe.policy.cluster_kinds import PolicyRepositorySpec
from kgwe.policy.loader import load_repository
from kgwe.reconcile.memo import Memo, fingerprint
from kgwe.vocab import MIG_CONFIG_LABEL, ROLLOUT_REVISION_ANNOTATION

SAMPLE = Path(__file__).resolve().parents[2] / "sample-repo"


@pytest.fixture
def policy(sample_policy):
    return sample_policy


@pytest.fixture
def rec(offline_reconciler):
    return offline_reconciler()


def nodes_of(ps) -> list[dict]:
    out = []
    for node in ps.inventory().spec.nodes:
        labels = {**node.labels, "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(node.gpus)}
        labels["nvidia.com/gpu.product"] = node.product
        out.append({"metadata": {"name": node.name, "labels": labels, "annotations": {}}, "spec": {}})
    return out


def gpu_pod(node: str) -> dict:
    return {
        "metadata": {"name": f"job-{node}", "namespace": "ml"},
        "spec": {"nodeName": node, "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }


def test_an_unchanged_policy_and_inventory_are_planned_once(rec, policy):
    nodes = nodes_of(policy)
    first = rec.desired(policy, facts_from_objects(nodes, {}))
    again = rec.desired(policy, facts_from_objects(nodes_of(policy), {}))  # read again, equal
    assert rec.plans_computed == 1
    assert again == first


def test_any_changed_input_plans_again(rec, policy):
    nodes = nodes_of(policy)
    base = rec.desired(policy, facts_from_objects(nodes, {}))
    h100 = next(n["metadata"]["name"] for n in nodes if "h100" in n["metadata"]["name"])

    # the busy set: a pod now holds a GPU of one node
    busy = rec.desired(policy, facts_from_objects(nodes, {h100: [gpu_pod(h100)]}))
    assert rec.plans_computed == 2
    assert busy.inventory_doc != base.inventory_doc

    # a node label (here: the config the MIG manager was told to apply)
    relabelled = nodes_of(policy)
    relabelled[0]["metadata"]["labels"][MIG_CONFIG_LABEL] = "all-1g.10gb"
    rec.desired(policy, facts_from_objects(relabelled, {}))
    assert rec.plans_computed == 3

    # an annotation (a node changed for the pool's current revision is pinned)
    pinned = nodes_of(policy)
    pinned[0]["metadata"]["annotations"][ROLLOUT_REVISION_ANNOTATION] = base.revisions["inference-h100"]
    rec.desired(policy, facts_from_objects(pinned, {}))
    assert rec.plans_computed == 4

    # not an annotation another component owns (the TTL controller's follows the cluster's size)
    foreign = nodes_of(policy)
    foreign[0]["metadata"]["annotations"][ROLLOUT_REVISION_ANNOTATION] = base.revisions["inference-h100"]
    foreign[0]["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] = "15"
    rec.desired(policy, facts_from_objects(foreign, {}))
    assert rec.plans_computed == 4

    # the live mig-parted configs (the same nodes as just before)
    rec.configs = {"kgwe-extra": [{"devices": "all", "mig-enabled": False}]}
    rec.desired(policy, facts_from_objects(pinned, {}))
    assert rec.plans_computed == 5

    # another revision: a PolicySet loaded again is another input, even with equal content
    rec.configs = {}
    rec.desired(load_repository(SAMPLE), facts_from_objects(nodes, {}))
    assert rec.plans_computed == 6

    # and back to where it started: planned again (only the last desired state is kept), same result
    assert rec.desired(policy, facts_from_objects(nodes, {})) == base
    assert rec.plans_computed == 7


def test_a_new_policy_on_the_same_nodes_plans_on_the_inventory_kept(rec, policy):
    nodes = nodes_of(policy)
    first = rec.desired(policy, facts_from_objects(nodes, {}))
    other = load_repository(SAMPLE)  # another revision, the nodes as before: planned again, not read again
    second = rec.desired(other, facts_from_objects(nodes_of(policy), {}))
    assert rec.plans_computed == 2
    assert second.inventory_doc is first.inventory_doc

    h100 = next(n["metadata"]["name"] for n in nodes if "h100" in n["metadata"]["name"])
    busy = rec.desired(other, facts_from_objects(nodes, {h100: [gpu_pod(h100)]}))  # a node fact changed
    assert busy.inventory_doc is not first.inventory_doc
    assert busy.inventory_doc != first.inventory_doc


def test_a_commit_is_loaded_and_validated_once(rec, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(SAMPLE, work)
    repo = git.Repo.init(work, initial_branch="main")
    author = git.Actor("t", "t@x")
    repo.git.add("-A")
    first = repo.index.commit("one", author=author, committer=author).hexsha
    (work / "scoring" / "default.yaml").write_text("kind: ScoringProfile\n")  # invalid: no metadata
    repo.git.add("-A")
    second = repo.index.commit("two", author=author, committer=author).hexsha
    source = GitSource(str(work), GitRef(branch="main"), cache_dir=tmp_path / "cache", allow_local=True)
    source.fetch()
    spec = PolicyRepositorySpec.model_validate({"url": "https://git.example/policy.git"})

    good, errors = rec._load(source, first, spec)
    assert not errors
    assert rec._load(source, first, spec)[0] is good
    assert rec._loads.misses == 1
    bad, errors = rec._load(source, second, spec)  # the revision to apply, and the last good one kept
    assert errors and bad is not good
    assert rec._load(source, first, spec)[0] is good
    assert rec._load(source, second, spec)[0] is bad
    assert rec._loads.misses == 2
    # another policy path is another input
    rec._load(
        source, first, PolicyRepositorySpec.model_validate({"url": "https://g.example/p.git", "path": "mig"})
    )
    assert rec._loads.misses == 3
    # an export that failed (a policy path the commit lacks) is tried again, never kept
    absent = PolicyRepositorySpec.model_validate({"url": "https://g.example/p.git", "path": "absent"})
    assert rec._load(source, first, absent)[0] is None
    assert rec._load(source, first, absent)[0] is None
    assert rec._loads.misses == 5


def test_memo_keeps_the_last_keys_only():
    memo: Memo[int] = Memo(2)
    for key in ("a", "b", "a", "c", "a", "b"):
        memo.get(key, lambda k=key: ord(k))
    assert memo.misses == 4  # a, b, c, then b again (dropped when c came)


def test_fingerprint_covers_nested_values_and_ignores_key_order():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": {"x": 1}}) != fingerprint({"a": {"x": 2}})
    assert fingerprint(["a"], "b") != fingerprint(["a", "b"])
