"""Fixtures for the controller end-to-end tests on the real control plane: CRDs installed from deploy/,
the MIG manager stand-in reading KGWE's mig-parted ConfigMap, and a policy repository in a bare Git repo."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client

from kgwe.cluster.client import ensure_namespace
from kgwe.cluster.crds import install_crds
from kgwe.policy.loader import load_repository
from kgwe.reconcile.repository import RepositoryReconciler
from tests.harness.policyrepos import delete_unreleased

ENV = {
    "GIT_AUTHOR_NAME": "Human",
    "GIT_AUTHOR_EMAIL": "h@x",
    "GIT_COMMITTER_NAME": "Human",
    "GIT_COMMITTER_EMAIL": "h@x",
    "HOME": "/tmp",
    "PATH": "/usr/bin:/bin",
}
SYSTEM_NS = "kgwe-system"
MIG_NS = "gpu-operator"
PR = ("kgwe.nvidia.io", "v1", SYSTEM_NS, "policyrepositories")  # group, version, namespace, plural
SAMPLE = Path(__file__).resolve().parents[2] / "sample-repo"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


def strategy_yaml(
    pool: str,
    profile_shares: str = "1g.10gb: 100%",
    max_unavailable: str = "1",
    drain: bool = False,
    pending_timeout: str = "60s",
    partition: str = "",
) -> str:
    """A MIGStrategy for `pool`; `partition`: more partitionStrategy lines (4-space indented)."""
    return f"""apiVersion: kgwe.nvidia.io/v1
kind: MIGStrategy
metadata:
  name: {pool}
spec:
  nodeSelector:
    kgwe.nvidia.io/pool: {pool}
  partitionStrategy:
    preferredProfiles:
      - {profile_shares}
{partition}  rollout:
    maxUnavailable: {max_unavailable}
    drain: {str(drain).lower()}
    pendingTimeout: {pending_timeout}
"""


SCORING = """apiVersion: kgwe.nvidia.io/v1
kind: ScoringProfile
metadata:
  name: default
spec:
  default: true
  weights: {topology: 40, resource: 35, balance: 25}
  strategy: BinPack
  extender: {weight: 5, ignorable: false, httpTimeout: 2s}
"""


class PolicyRemote:
    """A bare repository plus a working clone; `commit` pushes changes of files under policy/."""

    def __init__(self, root: Path) -> None:
        self.bare, self.work = root / "policy.git", root / "work"
        git(root, "init", "-q", "--bare", "-b", "main", str(self.bare))
        git(root, "clone", "-q", str(self.bare), str(self.work))
        git(self.work, "checkout", "-q", "-b", "main")

    def commit(self, files: dict[str, str | None], message: str = "policy change") -> str:
        """Write (None: remove) the files, commit and push."""
        for rel, text in files.items():
            path = self.work / rel
            if text is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-qm", message)
        git(self.work, "pull", "-q", "--rebase", "origin", "main") if self.has_remote_main() else None
        git(self.work, "push", "-q", "origin", "HEAD:main")
        return git(self.work, "rev-parse", "HEAD")

    def has_remote_main(self) -> bool:
        return bool(git(self.bare, "branch", "--list", "main"))


class OfflineReconciler(RepositoryReconciler):
    """The controller's planning with the cluster's mig-parted ConfigMap held in memory (no API reads)."""

    def __init__(self, configs: dict | None = None) -> None:
        super().__init__(client.ApiClient(), "kgwe-system", "sample", cache_dir=Path("/nonexistent"))
        self.configs = dict(configs or {})

    def _live_mig_configs(self, namespace: str, name: str) -> dict:
        return dict(self.configs)


@pytest.fixture
def offline_reconciler() -> type[OfflineReconciler]:
    return OfflineReconciler


@pytest.fixture(scope="session")
def sample_policy() -> Any:
    ps = load_repository(SAMPLE)
    assert not ps.errors
    return ps


@pytest.fixture(scope="session")
def kgwe_crds(k8s_api: client.ApiClient) -> None:
    install_crds(k8s_api)  # deploy/crds, waits until Established
    ensure_namespace(k8s_api, SYSTEM_NS)
    ensure_namespace(k8s_api, MIG_NS)


@pytest.fixture
def kgwe_mig_manager(k8s_api: client.ApiClient) -> Iterator[Any]:
    from kgwe.localcluster.migmanager import MigManagerStandIn

    with MigManagerStandIn(
        k8s_api, delay_seconds=0.3, config_namespace=MIG_NS, config_map="kgwe-mig-parted-config"
    ) as manager:
        yield manager


@pytest.fixture
def e2e(
    k8s_api: client.ApiClient,
    kgwe_crds: None,
    gpu_node: Callable[..., str],
    tmp_path: Path,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[SimpleNamespace]:
    """A fresh pool label, a policy remote served over HTTPS on loopback (PolicyRepository URLs must be
    https:// or ssh://; git trusts the test CA through GIT_SSL_CAINFO), and helpers to create the
    PolicyRepository and nodes."""
    from kgwe.localcluster.gitserver import GitHttpsServer

    pool = f"e2e-{secrets.token_hex(3)}"
    remote = PolicyRemote(tmp_path)
    git_server = GitHttpsServer(tmp_path).start()
    monkeypatch.setenv("GIT_SSL_CAINFO", git_server.ca_file)
    remote.url = git_server.url(remote.bare.name)
    custom = client.CustomObjectsApi(k8s_api)
    core = client.CoreV1Api(k8s_api)
    created: list[str] = []

    def make_nodes(count: int) -> list[str]:
        names = [
            gpu_node("DGX-H100", name=f"{pool}-n{i}", labels={"kgwe.nvidia.io/pool": pool})
            for i in range(count)
        ]
        return names

    def make_repository(interval: str = "1h", reports: dict | None = None) -> str:
        body = {
            "apiVersion": "kgwe.nvidia.io/v1",
            "kind": "PolicyRepository",
            "metadata": {"name": pool, "namespace": SYSTEM_NS},
            "spec": {
                "url": remote.url,
                "ref": {"branch": "main"},
                "path": "policy",
                "interval": interval,
            },
        }
        if reports:
            body["spec"]["reports"] = reports
        custom.create_namespaced_custom_object("kgwe.nvidia.io", "v1", SYSTEM_NS, "policyrepositories", body)
        created.append(pool)
        return pool

    def status() -> dict:
        return obj().get("status") or {}

    def obj() -> dict:
        return custom.get_namespaced_custom_object(*PR, pool)

    def labels(node: str) -> dict:
        return core.read_node(node).metadata.labels or {}

    yield SimpleNamespace(
        pool=pool,
        remote=remote,
        make_nodes=make_nodes,
        make_repository=make_repository,
        status=status,
        labels=labels,
        core=core,
        custom=custom,
        tmp=tmp_path,
        namespace=namespace,
        strategy_yaml=strategy_yaml,
        SCORING=SCORING,
        obj=obj,
        base={"policy/mig.yaml": strategy_yaml(pool), "policy/scoring.yaml": SCORING},
    )
    for name in created:
        delete_unreleased(custom, SYSTEM_NS, name)
    git_server.stop()
