"""deploy/ applied to the real API server, and the controller run as its ServiceAccount (impersonated), so
the RBAC is proven sufficient by a full reconcile and a full offboarding, and proven narrow by refused extra
verbs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.cluster.nodecache import NodeCache
from kgwe.reconcile.repository import RepositoryReconciler
from kgwe.reconcile.status import condition
from kgwe.resources import deploy_dir
from tests.harness.deployed import apply_docs
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster
SA_USER = "system:serviceaccount:kgwe-system:kgwe-controller"


def kustomize_docs(root: Path) -> list[dict]:
    """The objects of deploy/kustomization.yaml (plain `resources` only, which is all the base uses)."""
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources"}, "keep the base transform-free"
    docs = []
    for rel in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((root / rel).read_text()) if d]
    return docs


def test_deploy_base_applies_and_its_rbac_is_enough_and_narrow(k8s_api, kgwe_crds, e2e, kgwe_mig_manager):
    docs = kustomize_docs(deploy_dir())
    kinds = [d["kind"] for d in docs]
    assert kinds.count("CustomResourceDefinition") == 2 and "Deployment" in kinds and "Service" in kinds
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    apply_docs(k8s_api, docs, "deploy-test")
    apps = client.AppsV1Api(k8s_api)
    assert apps.read_namespaced_deployment("kgwe-controller", "kgwe-system").spec.replicas == 2

    # The controller as its ServiceAccount: a full reconcile with a MIG rollout must succeed.
    sa_api = client.ApiClient(k8s_api.configuration)
    sa_api.set_default_header("Impersonate-User", SA_USER)
    e2e.make_nodes(1)
    e2e.remote.commit(e2e.base)
    e2e.make_repository()
    stop = threading.Event()
    nodes = NodeCache(sa_api).start(stop)  # as the controller runs it: the GPU nodes kept by a watch
    rec = RepositoryReconciler(
        sa_api, "kgwe-system", e2e.pool, cache_dir=e2e.tmp / "sa-cache", node_cache=nodes
    )

    def ready() -> bool:
        outcome = rec.reconcile()
        assert outcome is None or outcome.phase in ("ready", "progressing"), outcome
        return outcome is not None and outcome.phase == "ready"

    wait_for("ready as the ServiceAccount", ready, 90)
    assert condition(e2e.status(), "Ready")["status"] == "True"
    watched = client.CoreV1Api(sa_api).list_node(watch=True, timeout_seconds=1, _preload_content=False)
    assert watched.status == 200  # the node cache's watch is allowed
    watched.release_conn()

    # Offboarding as the ServiceAccount too: deleted, everything KGWE wrote released, the finalizer gone.
    e2e.custom.delete_namespaced_custom_object(
        "kgwe.nvidia.io", "v1", "kgwe-system", "policyrepositories", e2e.pool
    )

    def released() -> bool:
        outcome = rec.reconcile()
        assert outcome is None or outcome.phase == "releasing", outcome
        return outcome is None

    wait_for("released as the ServiceAccount", released, 90)
    with pytest.raises(ApiException) as gone:
        e2e.obj()
    assert gone.value.status == 404
    stop.set()

    # ...and nothing more than it needs.
    core = client.CoreV1Api(sa_api)
    new_ns = client.V1Namespace(metadata=client.V1ObjectMeta(name="nope"))
    for action in (
        lambda: core.delete_node("anything"),
        lambda: core.list_secret_for_all_namespaces(),
        lambda: core.read_namespaced_secret("x", "default"),
        lambda: core.create_namespace(new_ns),
        lambda: core.delete_namespaced_pod("x", e2e.namespace),
    ):
        with pytest.raises(ApiException) as err:
            action()
        assert err.value.status == 403


def test_gitops_examples_parse_and_point_at_real_paths():
    from kgwe.policy import PolicyRepository

    root = deploy_dir() / "examples"
    docs = {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d] for p in root.rglob("*.yaml")}
    repo = next(d for d in docs["policyrepository.yaml"] if d["kind"] == "PolicyRepository")
    PolicyRepository.model_validate(repo)
    argo = docs["applications.yaml"]
    assert argo[0]["spec"]["source"]["path"] == "deploy" and (deploy_dir() / "kustomization.yaml").is_file()
    flux = docs["kustomizations.yaml"]
    assert [d["kind"] for d in flux] == ["GitRepository", "Kustomization", "Kustomization"]
    assert flux[2]["spec"]["dependsOn"] == [{"name": "kgwe"}]
