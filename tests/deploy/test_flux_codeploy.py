"""KGWE beside Flux, on real components: Flux's kustomize-controller (built from its Go module) applies
deploy/ and the PolicyRepository from deploy/examples/flux/ while KGWE's controller (run here, as
`kgwe controller`) reconciles sample-repo from a real Git repository. Both run several intervals, each
prunes once (Flux drops the agent in a new deploy/ revision; KGWE drops a budget in a new policy commit),
and every write to every object is attributed to its field manager: each side writes only its own
objects, neither prune deletes the other's, and the PolicyRepository's spec (Flux's) and status (KGWE's)
never fight."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes import client

from kgwe.cluster.client import ensure_namespace
from kgwe.localcluster import gpunodes
from kgwe.localcluster.controlplane import free_port, tail
from kgwe.localcluster.gitserver import GitHttpsServer
from kgwe.localcluster.migmanager import MigManagerStandIn
from kgwe.resources import deploy_dir, sample_repo_dir
from kgwe.vocab import FIELD_MANAGER as KGWE
from kgwe.vocab import (
    POLICY_REPOSITORY_FINALIZER,
    REVISION_ANNOTATION,
    REVISION_AUTHOR_ANNOTATION,
    SCHEDULER_CONFIG_HASH_ANNOTATION,
    SCHEDULER_DEPLOYMENT,
)
from tests.harness import chart, flux
from tests.harness.crds import install_crds
from tests.harness.waiting import wait_for
from tests.harness.writes import WriteRecorder, object_key

pytestmark = pytest.mark.usefixtures("chart", "flux")  # helm renders deploy/, Flux applies it

FLUX = flux.FIELD_MANAGER
NS, FLUX_NS = "kgwe-system", "flux-system"
INTERVAL = "10s"  # both sides: Flux's Kustomizations and KGWE's PolicyRepository
OBSERVE_INTERVALS = 2  # after both prunes, this many more reconciles of each side are watched
WATCHED = [
    ("v1", "Namespace"), ("v1", "ServiceAccount"), ("v1", "Service"), ("v1", "ConfigMap"), ("v1", "Secret"),
    ("v1", "ResourceQuota"), ("apps/v1", "Deployment"), ("apps/v1", "DaemonSet"),
    ("policy/v1", "PodDisruptionBudget"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"), ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("kgwe.nvidia.io/v1", "PolicyRepository"),
]  # fmt: skip
REPO = "gpu-policy"  # deploy/examples/policyrepository.yaml
AGENT = "DaemonSet/gpu-operator/kgwe-agent"  # beside the GPU Operator
QUOTA = "ResourceQuota/ds-notebooks/kgwe-budget"
TEAM_NAMESPACES = ("ds-notebooks", "inference-prod", "inference-staging", "ml-training", "ml-experiments")
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@x",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x",
}


def _git(cwd: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), **GIT_ENV}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _ready(obj: dict | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _flux_kustomizations(repo_url: str) -> tuple[list[dict], dict[str, bytes]]:
    """deploy/examples/flux/ and the PolicyRepository example, as the test feeds them to Flux.

    The only changes: sources are ExternalArtifacts of the same names (no source-controller here), intervals
    are short, and the PolicyRepository points at the loopback Git server (its credentials: the example's).
    """
    example = [
        d for d in yaml.safe_load_all((deploy_dir() / "examples/flux/kustomizations.yaml").read_text()) if d
    ]
    kustomizations = [d for d in example if d["kind"] == "Kustomization"]
    for k in kustomizations:
        k["spec"]["sourceRef"]["kind"] = "ExternalArtifact"
        k["spec"]["interval"] = INTERVAL
        k["spec"]["timeout"] = "5m"
    docs = _example_docs()
    repo = next(d for d in docs if d["kind"] == "PolicyRepository")
    repo["spec"].update(url=repo_url, path="", interval=INTERVAL)
    secret = next(d for d in docs if d["kind"] == "Secret")  # its credentials go to the loopback server
    secret["metadata"]["annotations"]["kgwe.nvidia.io/git-hosts"] = repo_url.split("/")[2]
    del repo["spec"]["reports"]  # no report commits in this test (costs are off)
    path = next(k for k in kustomizations if k["metadata"]["name"] == "kgwe-policy-repository")["spec"][
        "path"
    ]
    cluster_config = {f"{path.strip('./')}/policyrepository.yaml": yaml.safe_dump_all(docs).encode()}
    return kustomizations, cluster_config


def _example_docs() -> list[dict]:
    return [d for d in yaml.safe_load_all((deploy_dir() / "examples/policyrepository.yaml").read_text()) if d]


def _deploy_tree(*sets: str) -> dict[str, bytes]:
    """The KGWE release repository's deploy/ folder: the chart rendered (with extra --set values)."""
    files = chart.deploy_files(
        chart.template(*[a for s in ("namespace.create=true", *sets) for a in ("--set", s)])
    )
    return {f"deploy/{rel}": text.encode() for rel, text in files.items()}


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, new_control_plane: Callable[..., Any]
) -> Iterator[SimpleNamespace]:
    """A control plane of its own (Flux and KGWE own cluster-wide names), Flux's CRDs, two GPU nodes of the
    sample-repo pools, the team namespaces, the GPU Operator namespace and its MIG manager stand-in."""
    tmp = tmp_path_factory.mktemp("flux")
    with new_control_plane() as cp:
        api = cp.api_client()
        install_crds(api, flux.flux_crds())
        gpunodes.ensure_gpu_operator_objects(api)  # its namespace and runtime class (the agent's)
        for ns in (FLUX_NS, *TEAM_NAMESPACES):
            ensure_namespace(api, ns)
        nodes = {
            "flux-h100": ("DGX-H100", {"gpu.nvidia.com/class": "H100", "kgwe.nvidia.io/pool": "inference"}),
            "flux-a100": ("DGX-A100", {"gpu.nvidia.com/class": "A100", "kgwe.nvidia.io/pool": "training"}),
        }
        for name, (machine, labels) in nodes.items():
            gpunodes.create_gpu_node(api, name, machine, labels=labels)
        gpunodes.wait_nodes_ready(api, list(nodes), timeout_seconds=120)
        # sample-repo in a bare repository behind a real HTTPS Git server asking for the example Secret's
        # credentials; `policy` is a working clone that pushes policy changes
        (tmp / "git").mkdir()
        _git(tmp / "git", "init", "-q", "--bare", "-b", "main", "gpu-policy.git")
        policy = tmp / "gpu-policy"
        shutil.copytree(sample_repo_dir(), policy)
        _git(policy, "init", "-q", "-b", "main")
        _git(policy, "add", "-A")
        _git(policy, "commit", "-qm", "sample-repo")
        _git(policy, "push", "-q", str(tmp / "git" / "gpu-policy.git"), "main")
        secret = next(d for d in _example_docs() if d["kind"] == "Secret")["stringData"]
        git_server = GitHttpsServer(tmp / "git", username=secret["username"], password=secret["password"])
        with (
            git_server,
            MigManagerStandIn(
                api, delay_seconds=0.3, config_namespace="gpu-operator", config_map="kgwe-mig-parted-config"
            ),
        ):
            yield SimpleNamespace(
                cp=cp, api=api, tmp=tmp, policy=policy, git=git_server, url=git_server.url("gpu-policy.git")
            )


class _Run:
    """One co-deployment run: Flux (kustomize-controller) and KGWE (`kgwe controller`) side by side."""

    def __init__(
        self, world: SimpleNamespace, server: flux.ArtifactServer, fc: flux.KustomizeController
    ) -> None:
        self.world, self.server, self.fc = world, server, fc
        self.custom = client.CustomObjectsApi(world.api)
        self.kgwe_port = free_port()
        self.kgwe_log = world.tmp / "kgwe-controller.log"

    def logs(self) -> str:
        flux_log, kgwe_log = tail(self.fc.log_path, 30), tail(self.kgwe_log, 30)
        return f"kustomize-controller:\n{flux_log}\nkgwe controller:\n{kgwe_log}"

    def wait(self, what: str, check: Callable[[], Any], timeout_seconds: float = 240) -> Any:
        return wait_for(what, check, timeout_seconds, describe=self.logs)

    def flux_reconciles(self) -> int:
        return tail(self.fc.log_path, 100000).count("Reconciliation finished")

    def kustomization(self, name: str) -> dict:
        group, version = flux.KUSTOMIZE_GROUP, flux.KUSTOMIZE_VERSION
        return self.custom.get_namespaced_custom_object(group, version, FLUX_NS, "kustomizations", name)

    def repo(self) -> dict:
        try:
            return self.custom.get_namespaced_custom_object(
                "kgwe.nvidia.io", "v1", NS, "policyrepositories", REPO
            )
        except client.ApiException:
            return {}

    def publish_deploy(self, *sets: str) -> None:
        flux.publish(self.world.api, self.server, FLUX_NS, "kgwe", flux.tarball(_deploy_tree(*sets)))

    def start_kgwe(self) -> subprocess.Popen[bytes]:
        argv = [
            str(Path(sys.executable).with_name("kgwe")), "controller",
            f"--kubeconfig={self.world.cp.kubeconfig_path}", f"--namespace={NS}",
            f"--listen=127.0.0.1:{self.kgwe_port}", "--no-costs", "--identity=kgwe-local",
            f"--cache-dir={self.world.tmp / 'kgwe-cache'}",
        ]  # fmt: skip
        env = {**os.environ, "GIT_SSL_CAINFO": self.world.git.ca_file}  # trust the loopback Git server
        return subprocess.Popen(argv, stdout=self.kgwe_log.open("wb"), stderr=subprocess.STDOUT, env=env)


def _co_deploy(world: SimpleNamespace) -> dict[str, Any]:
    """Flux applies deploy/ and the PolicyRepository, KGWE syncs sample-repo, each prunes once; returns what
    happened: inventories before/after the prunes, write tables, deletions, reconcile counts."""
    api = world.api
    kustomizations, cluster_config = _flux_kustomizations(world.url)
    out: dict[str, Any] = {}
    recorders: list[WriteRecorder] = []
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [r.stop() for r in recorders])
        recorders.append(WriteRecorder(api, [w for w in WATCHED if w[1] != "PolicyRepository"]).start())
        server = stack.enter_context(flux.ArtifactServer())
        fc = stack.enter_context(flux.KustomizeController(world.cp.kubeconfig_path, world.tmp / "flux"))
        run = _Run(world, server, fc)
        run.publish_deploy()
        flux.publish(api, server, FLUX_NS, "flux-system", flux.tarball(cluster_config))
        for k in kustomizations:
            run.custom.create_namespaced_custom_object(
                flux.KUSTOMIZE_GROUP, flux.KUSTOMIZE_VERSION, FLUX_NS, "kustomizations", k
            )
        run.wait("Flux to apply deploy/ (wait: true)", lambda: _ready(run.kustomization("kgwe")), 300)
        # the CRD exists now: watch PolicyRepositories too, before Flux's second Kustomization applies one
        recorders.append(WriteRecorder(api, [("kgwe.nvidia.io/v1", "PolicyRepository")]).start())
        kgwe = run.start_kgwe()
        try:
            run.wait(
                "Flux to apply the PolicyRepository",
                lambda: _ready(run.kustomization("kgwe-policy-repository")),
            )
            run.wait("KGWE to sync sample-repo", lambda: _kgwe_inventory(run.repo()))
            out["flux_before"] = _flux_inventory(run.kustomization("kgwe"))
            out["kgwe_before"] = _kgwe_inventory(run.repo())
            # Flux prunes: a deploy/ revision without the agent. KGWE prunes: a budget leaves the policy.
            run.publish_deploy("agent.enabled=false")
            (world.policy / "budgets" / "data-science.yaml").unlink()
            _git(world.policy, "commit", "-qam", "data-science has no budget any more")
            _git(world.policy, "push", "-q", str(world.tmp / "git" / "gpu-policy.git"), "main")
            run.wait(
                "Flux to prune the agent", lambda: AGENT not in _flux_inventory(run.kustomization("kgwe"))
            )
            run.wait("KGWE to prune the budget quota", lambda: QUOTA not in _kgwe_inventory(run.repo()))
            flux_then, kgwe_then = run.flux_reconciles(), _metric(run.kgwe_port, "kgwe_reconcile_total")
            run.wait(
                f"{OBSERVE_INTERVALS} more reconciles of each side after the prunes",
                lambda: (
                    run.flux_reconciles() >= max(6, flux_then + OBSERVE_INTERVALS)
                    and _metric(run.kgwe_port, "kgwe_reconcile_total")
                    >= max(3, kgwe_then + OBSERVE_INTERVALS)
                ),
            )
            out["kgwe_reconciles"] = _metric(run.kgwe_port, "kgwe_reconcile_total")
            out["kgwe_objects_pruned"] = _metric(run.kgwe_port, "kgwe_objects_pruned_total")
            out["repo"] = run.repo()
            out["flux_after"] = _flux_inventory(run.kustomization("kgwe"))
        finally:
            kgwe.terminate()
            kgwe.wait(timeout=30)
        out["flux_reconciles"] = run.flux_reconciles()
    out["kgwe_after"] = _kgwe_inventory(out["repo"])
    out["table"] = {k: v for r in recorders for k, v in r.table().items()}
    out["deleted"] = {key for r in recorders for key, _ in r.deleted}
    return out


# The fields KGWE owns on an object Flux applies: the KGWE scheduler's pod-template hash annotation, which
# restarts it when the rendered configuration changes, and the audit stamp of that restart (checked field by
# field in the test).
SCHEDULER_KEY = object_key("Deployment", NS, SCHEDULER_DEPLOYMENT)
SCHEDULER_HASH_FIELDS = {
    # the audit stamp: the policy commit, and its author, that restarted it
    "f:metadata": {"f:annotations": {f"f:{REVISION_ANNOTATION}": {}, f"f:{REVISION_AUTHOR_ANNOTATION}": {}}},
    "f:spec": {
        "f:template": {"f:metadata": {"f:annotations": {f"f:{SCHEDULER_CONFIG_HASH_ANNOTATION}": {}}}}
    },
}


def _cross_owner_writes(
    table: dict, flux_owned: set[str], kgwe_owned: set[str]
) -> list[tuple[str, str, int]]:
    """Writes by one side to the other's objects; KGWE's writes of the PolicyRepository's status and of its
    finalizer (checked to be its only field there below), and of the scheduler's hash annotation, are its
    own."""
    cross = []
    for key, by_manager in table.items():
        for manager_sub, n in by_manager.items():
            manager, _, sub = manager_sub.partition("/")
            own_write = key.startswith("PolicyRepository/") and (sub == "status" or manager == KGWE)
            own_write = own_write or (key == SCHEDULER_KEY and manager == KGWE)
            if (key in flux_owned and manager == KGWE and not own_write) or (
                key in kgwe_owned and manager == FLUX
            ):
                cross.append((key, manager_sub, n))
    return cross


def test_flux_and_kgwe_each_write_only_their_own_objects(world):
    r = _co_deploy(world)
    repo_key = object_key("PolicyRepository", NS, REPO)
    flux_owned = r["flux_before"] | r["flux_after"] | {repo_key, object_key("Secret", NS, "gpu-policy-git")}
    kgwe_owned = r["kgwe_before"] | r["kgwe_after"]
    flux_pruned, kgwe_pruned = r["flux_before"] - r["flux_after"], r["kgwe_before"] - r["kgwe_after"]
    cross = _cross_owner_writes(r["table"], flux_owned, kgwe_owned)
    figure = {
        "flux_reconciles": r["flux_reconciles"],
        "kgwe_reconciles": r["kgwe_reconciles"],
        "flux_owned_objects": len(flux_owned),
        "kgwe_owned_objects": len(kgwe_owned),
        "flux_pruned": sorted(flux_pruned),
        "kgwe_pruned": sorted(kgwe_pruned),
        "writes_per_object_per_manager": {
            k: v for k, v in r["table"].items() if k in flux_owned | kgwe_owned
        },
        "cross_owner_writes": sum(n for _, _, n in cross),
    }
    print("\n" + json.dumps(figure, indent=1))
    print(json.dumps({k: v for k, v in figure.items() if k != "writes_per_object_per_manager"}))

    assert not flux_owned & kgwe_owned
    deployment = client.AppsV1Api(world.api).read_namespaced_deployment(SCHEDULER_DEPLOYMENT, NS)
    kgwe_fields = [m.fields_v1 for m in deployment.metadata.managed_fields if m.manager == KGWE]
    assert kgwe_fields == [SCHEDULER_HASH_FIELDS], kgwe_fields  # KGWE owns those annotations, nothing else
    assert not cross, f"writes to the other side's objects: {cross}"
    assert r["flux_reconciles"] >= 6 and r["kgwe_reconciles"] >= 3, "both sides ran several intervals"
    # each prune deleted exactly the objects its owner dropped, and nothing else was deleted
    assert AGENT in flux_pruned and QUOTA in kgwe_pruned and r["kgwe_objects_pruned"] >= 1
    unowned = r["deleted"] - flux_pruned - kgwe_pruned
    assert not unowned, f"deleted, but not pruned by their owner: {unowned}"
    assert flux_pruned | kgwe_pruned <= r["deleted"]
    # the PolicyRepository: Flux created its spec once and never rewrote it; KGWE wrote its status and,
    # once, its finalizer (offboarding) — no other field of the object
    assert r["table"][repo_key].get(FLUX) == 1, r["table"][repo_key]
    assert set(r["table"][repo_key]) <= {FLUX, KGWE, f"{KGWE}/status"}, r["table"][repo_key]
    assert r["table"][repo_key].get(KGWE, 0) <= 1, r["table"][repo_key]
    kgwe_fields = [
        m["fieldsV1"]
        for m in r["repo"]["metadata"]["managedFields"]
        if m["manager"] == KGWE and not m.get("subresource")
    ]
    assert kgwe_fields == [
        {"f:metadata": {"f:finalizers": {".": {}, f'v:"{POLICY_REPOSITORY_FINALIZER}"': {}}}}
    ]
    assert r["repo"]["metadata"]["generation"] == 1


def _flux_inventory(kustomization: dict) -> set[str]:
    """Kustomization status.inventory entry ids (`<ns>_<name>_<group>_<kind>`) as object keys."""
    out = set()
    for entry in ((kustomization.get("status") or {}).get("inventory") or {}).get("entries") or []:
        ns, name, _group, kind = entry["id"].split("_")
        out.add(object_key(kind, ns or None, name))
    return out


def _kgwe_inventory(repo: dict) -> set[str]:
    return {
        object_key(e["kind"], e.get("namespace"), e["name"])
        for e in (repo.get("status") or {}).get("inventory") or []
    }
