"""Server-side apply, dry-run diff, drift correction and prune against the real kube-apiserver."""

from __future__ import annotations

import pytest
from kubernetes import client

from kgwe.cluster.apply import Applier, ObjectRef
from kgwe.errors import KgweError
from kgwe.runtime.kube import KubeCluster
from kgwe.vocab import FIELD_MANAGER, PRUNE_ANNOTATION, REPOSITORY_LABEL

pytestmark = pytest.mark.cluster


def cm(namespace: str, name: str, data: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def test_apply_only_what_differs_and_count_drift(k8s_api: client.ApiClient, namespace: str):
    core = client.CoreV1Api(k8s_api)
    applier = Applier(KubeCluster(k8s_api), "kgwe-system.gpu-policy")
    objs = [
        cm(namespace, "kgwe-scoring", {"weights": "40/35/25"}),
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "kgwe-budget", "namespace": namespace},
            "spec": {"hard": {"requests.nvidia.com/gpu": "32"}},
        },
    ]

    first = applier.sync(objs, previous=[])
    assert len(first.created) == 2 and first.writes == 2
    live = core.read_namespaced_config_map("kgwe-scoring", namespace)
    assert live.metadata.labels[REPOSITORY_LABEL] == "kgwe-system.gpu-policy"
    assert {m.manager for m in live.metadata.managed_fields} == {FIELD_MANAGER}

    noop = applier.sync(objs, previous=[ObjectRef.of(o) for o in objs])
    assert noop.writes == 0 and len(noop.unchanged) == 2 and not noop.changed

    # Another manager adds its own label: KGWE leaves it alone and sees no difference.
    core.patch_namespaced_config_map(
        "kgwe-scoring", namespace, {"metadata": {"labels": {"team": "ml"}}}, field_manager="someone-else"
    )
    assert applier.sync(objs, previous=[]).writes == 0
    # A hand edit of a field KGWE owns is corrected and counted as drift.
    core.patch_namespaced_config_map(
        "kgwe-scoring", namespace, {"data": {"weights": "1/1/1"}}, field_manager="kubectl-edit"
    )
    fixed = applier.sync(objs, previous=[])
    assert [str(r) for r in fixed.drift_corrected] == [f"ConfigMap/{namespace}/kgwe-scoring"]
    live = core.read_namespaced_config_map("kgwe-scoring", namespace)
    assert live.data == {"weights": "40/35/25"} and live.metadata.labels["team"] == "ml"

    # A policy change is an update, not drift.
    objs[0]["data"]["weights"] = "50/30/20"
    changed = applier.sync(objs, previous=[])
    assert len(changed.updated) == 1 and not changed.drift_corrected


def test_prune_respects_inventory_optout_and_ownership(k8s_api: client.ApiClient, namespace: str):
    core = client.CoreV1Api(k8s_api)
    applier = Applier(KubeCluster(k8s_api), "kgwe-system.gpu-policy")
    keep, gone, protected = (cm(namespace, n, {"k": n}) for n in ("keep", "gone", "protected"))
    protected["metadata"]["annotations"] = {PRUNE_ANNOTATION: "disabled"}
    first = applier.sync([keep, gone, protected], previous=[])
    previous = first.applied
    # Someone else's object of the same name pattern, listed in a stale inventory: never deleted.
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="not-ours"), data={"x": "1"})
    )
    previous = [*previous, ObjectRef("v1", "ConfigMap", namespace, "not-ours")]

    second = applier.sync([keep], previous=previous)
    assert [r.name for r in second.pruned] == ["gone"]
    assert sorted(r.name for r in second.prune_skipped) == ["not-ours", "protected"]
    names = {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}
    assert {"keep", "protected", "not-ours"} <= names and "gone" not in names
    # Already-gone objects in the inventory are fine.
    assert applier.prune(previous, [ObjectRef.of(keep)]).pruned == []


def test_duplicate_objects_and_unknown_kinds_are_clear_errors(k8s_api: client.ApiClient, namespace: str):
    from kgwe.errors import KgweError

    applier = Applier(KubeCluster(k8s_api), "r")
    with pytest.raises(KgweError, match="not unique"):
        applier.sync([cm(namespace, "a", {}), cm(namespace, "a", {})], previous=[])
    with pytest.raises(KgweError, match="does not serve"):
        unknown = {"apiVersion": "example.com/v1", "kind": "Nope", "metadata": {"name": "x"}}
        applier.sync([unknown], previous=[])


def test_many_objects_are_diffed_together_and_applied_in_order(k8s_api: client.ApiClient, namespace: str):
    """The reads and dry runs go side by side; the outcome is per object, in the objects' order, and an
    object the server refuses fails alone."""
    core = client.CoreV1Api(k8s_api)
    applier = Applier(KubeCluster(k8s_api), "kgwe-system.gpu-policy")
    objs = [cm(namespace, f"cm-{i}", {"i": str(i)}) for i in range(12)]
    objs[5]["data"] = {"bad key/": "x"}  # the API server refuses this key
    first = applier.sync(objs, previous=[])
    assert [r.name for r in first.created] == [f"cm-{i}" for i in range(12) if i != 5]
    assert [r.name for r, _ in first.failed] == ["cm-5"]
    objs[5]["data"] = {"i": "5"}
    objs[7]["data"] = {"i": "seven"}
    second = applier.sync(objs, previous=[])
    assert [r.name for r in second.created] == ["cm-5"] and [r.name for r in second.updated] == ["cm-7"]
    assert len(second.unchanged) == 10
    assert core.read_namespaced_config_map("cm-7", namespace).data == {"i": "seven"}


def test_a_kind_the_cluster_does_not_serve_stops_the_apply_before_any_write(
    k8s_api: client.ApiClient, namespace: str
):
    applier = Applier(KubeCluster(k8s_api), "kgwe-system.gpu-policy")
    unknown = {
        "apiVersion": "example.com/v1",
        "kind": "Nothing",
        "metadata": {"name": "x", "namespace": namespace},
    }
    with pytest.raises(KgweError, match="does not serve"):
        applier.sync([cm(namespace, "first", {"a": "b"}), unknown], previous=[])
    names = [c.metadata.name for c in client.CoreV1Api(k8s_api).list_namespaced_config_map(namespace).items]
    assert "first" not in names  # never a partial apply
