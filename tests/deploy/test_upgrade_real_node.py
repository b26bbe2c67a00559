"""An upgrade from the previous KGWE commit (tests/compat/previous-commit: its chart and its image, built once
by hack/previous-image.sh) to this checkout, on the real node, in the worst moment a platform team can pick:
a PolicyRepository mid-rollout (MIG nodes relabelled and still applying, one waiting for a busy GPU),
metering writes in the leader's spool (the cost store, PostgreSQL on the host, is down), and GPUWorkloads
running. After `helm upgrade --reset-then-reuse-values`: nothing lost (the pod that ran during the outage is
metered with its real times, the workloads keep their Jobs and pods), nothing repeated (one interval per
pod, each node's GPUs repartitioned once), and the rollout finishes under the new controller. Then `helm
uninstall` while the GPUWorkloads still run: their pods keep running, and what KGWE wrote is released.

KGWE_WRITE_COMPAT_FIXTURES=1 also writes the objects the previous version's controllers wrote into
tests/compat/previous/cluster/ (tests/compat/test_previous_objects.py reads them)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.cost.store import CostStore
from kgwe.cost.usage import Period
from kgwe.localcluster.cluster import chart_image_reference
from kgwe.localcluster.controlplane import host_ip
from kgwe.localcluster.gitserver import GitHttpsServer
from kgwe.localcluster.heldpods import finish_held_pod
from kgwe.localcluster.realnode import CLUSTER_CIDR
from kgwe.reconcile.repository import read_spec
from kgwe.vocab import (
    BUDGET_QUOTA_NAME,
    KWOK_HOLD_ANNOTATION,
    MIG_ALL_DISABLED,
    MIG_CONFIG_LABEL,
    POLICY_REPOSITORY_FINALIZER,
    REQUESTED_AT_ANNOTATION,
    ROLLOUT_REVISION_ANNOTATION,
    SCHEDULING_ENABLED,
    SCHEDULING_NAMESPACE_LABEL,
    WORKLOAD_LABEL,
    WORKLOAD_ROLEBINDING,
    WORKLOADS_ENABLED,
    WORKLOADS_NAMESPACE_LABEL,
)
from tests.deploy.test_install_real_node import GIT_ENV, _pods_state, _ready, wait
from tests.harness.chart import CHART_DIR, helm
from tests.harness.postgres import PostgresServer

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.realnode,
    pytest.mark.image,
    pytest.mark.postgres,
    pytest.mark.timeout(3600),
]

NS = "kgwe-system"
PR = ("kgwe.nvidia.io", "v1", NS, "policyrepositories")
GW = ("kgwe.nvidia.io", "v1")
STRATEGY = "upgrade-h100"
POOL_NODES = [f"dgx-h100-0{i}" for i in range(1, 9)]  # sample-repo's inventory pool `inference`
BUSY_NODE = POOL_NODES[0]
A100 = "dgx-a100-01"  # outside the pool: the spooled pod runs there
MIG_APPLY_SECONDS = 15.0  # the MIG manager stand-in's apply time while the upgrade happens
COMPAT_OUT = Path(__file__).resolve().parents[1] / "compat" / "previous" / "cluster"


def _policy(namespace: str) -> dict[str, str]:
    return {
        "mig.yaml": f"""apiVersion: kgwe.nvidia.io/v1
kind: MIGStrategy
metadata: {{name: {STRATEGY}}}
spec:
  nodeSelector: {{kgwe.nvidia.io/pool: inference}}
  partitionStrategy:
    preferredProfiles:
      - 1g.10gb: 100%
  rollout: {{maxUnavailable: 2, drain: false, pendingTimeout: 10m}}
""",
        "scoring.yaml": """apiVersion: kgwe.nvidia.io/v1
kind: ScoringProfile
metadata: {name: default}
spec: {default: true, strategy: BestFit}
""",
        "budget.yaml": f"""apiVersion: kgwe.nvidia.io/v1
kind: GPUBudget
metadata: {{name: upgrade-team}}
spec:
  team: upgrade-team
  namespaces: [{namespace}]
  period: Monthly
  limit: {{amount: "100000", currency: USD}}
  quota:
    nvidia.com/gpu: 32
""",
    }


def _workload(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "kgwe.nvidia.io/v1",
        "kind": "GPUWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "workloadType": "Training",
            "gpuRequirements": {"count": 2, "product": "A100"},
            "podTemplate": {
                "metadata": {"annotations": {KWOK_HOLD_ANNOTATION: "true"}},  # runs until ended
                "spec": {"containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3"}]},
            },
        },
    }


def _held_pod(name: str, node: str, resource: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {KWOK_HOLD_ANNOTATION: "true"}},
        "spec": {
            "nodeName": node,
            "schedulerName": "kgwe-scheduler",
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {resource: "1"}}}],
        },
    }


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args], cwd=cwd, env={**GIT_ENV, "PATH": "/usr/bin:/bin"}, check=True, capture_output=True
    )


@pytest.fixture(scope="module")
def upgrade(
    _real_node_session, kgwe_image, previous_kgwe, chart, tmp_path_factory
) -> Iterator[SimpleNamespace]:
    """The previous KGWE installed from its own chart and image, its cost store PostgreSQL on the host, its
    policy in Git over https from the host; the real-node cluster is released afterwards (its GPU nodes'
    labels are KGWE's way out's, not the inventory's)."""
    cluster = _real_node_session.ensure()
    cluster.import_image(kgwe_image.archive)
    cluster.import_image(previous_kgwe.archive)
    cp, api = cluster.cp, cluster.cp.api_client()
    core = client.CoreV1Api(api)
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        "KUBECONFIG": str(cp.kubeconfig_path),
        **{f"HELM_{k}_HOME": str(home / k) for k in ("CACHE", "CONFIG", "DATA")},
    }
    host = host_ip()
    postgres = PostgresServer(host=host, trusted_networks=(CLUSTER_CIDR,)).start()
    work = tmp_path_factory.mktemp("policy")
    namespace = f"train-{secrets.token_hex(3)}"
    bare, clone = work / "policy.git", work / "clone"
    _git(work, "init", "-q", "--bare", "-b", "main", str(bare))
    _git(work, "clone", "-q", str(bare), str(clone))
    for name, text in _policy(namespace).items():
        (clone / name).write_text(text)
    _git(clone, "add", "-A")
    _git(clone, "commit", "-qm", "policy")
    _git(clone, "push", "-q", "origin", "HEAD:main")
    git = GitHttpsServer(work, host=host).start()
    core.create_namespace({"metadata": {"name": NS}})
    core.create_namespaced_secret(
        NS, {"metadata": {"name": "host-git-ca"}, "stringData": {"ca.crt": Path(git.ca_file).read_text()}}
    )
    core.create_namespaced_secret(NS, {"metadata": {"name": "cost-db"}, "stringData": {"url": postgres.url}})
    labels = {SCHEDULING_NAMESPACE_LABEL: SCHEDULING_ENABLED, WORKLOADS_NAMESPACE_LABEL: WORKLOADS_ENABLED}
    core.create_namespace({"metadata": {"name": namespace, "labels": labels}})
    run = SimpleNamespace(
        api=api, core=core, custom=client.CustomObjectsApi(api), env=env, cluster=cluster, postgres=postgres,
        git=git, namespace=namespace, previous=previous_kgwe, figures={}, uninstalled=False,
    )  # fmt: skip
    run.state = lambda: _pods_state(api, NS)
    try:
        installed = helm(
            "install", "kgwe", str(previous_kgwe.chart), "--namespace", NS,
            "--set", f"image.repository={previous_kgwe.reference.rsplit(':', 1)[0]}",
            "--set", "migController.costs.databaseSecret.name=cost-db",
            "--set", "migController.gitCASecretName=host-git-ca",
            "--wait", "--timeout", "10m", env=env, check=False,
        )  # fmt: skip
        if installed.returncode != 0:
            pytest.fail(
                f"installing the previous KGWE failed: {installed.stderr}\n{run.state()}", pytrace=False
            )
        yield run
    finally:
        print(json.dumps(run.figures))
        if not run.uninstalled:
            uninstall = ("uninstall", "kgwe", "--namespace", NS, "--no-hooks", "--wait", "--timeout", "5m")
            helm(*uninstall, env=env, check=False)
        git.stop()
        postgres.stop()
        _real_node_session.release()  # the next real-node test gets a fresh cluster and GPU nodes


def _repository(run: SimpleNamespace) -> dict[str, Any]:
    return run.custom.get_namespaced_custom_object(*PR, "gpu-policy")


def _rollout(run: SimpleNamespace) -> dict[str, Any]:
    return ((_repository(run).get("status") or {}).get("rollout") or {}).get(STRATEGY) or {}


def _controller_logs(run: SimpleNamespace) -> str:
    return "\n".join(
        run.core.read_namespaced_pod_log(p.metadata.name, NS, container="controller")
        for p in _ready(run.api, "controller")
    )


def _children(run: SimpleNamespace) -> dict[str, str]:
    """name -> uid of the GPUWorkloads' Jobs and pods."""
    batch = client.BatchV1Api(run.api)
    jobs = batch.list_namespaced_job(run.namespace, label_selector=WORKLOAD_LABEL).items
    pods = run.core.list_namespaced_pod(run.namespace, label_selector=WORKLOAD_LABEL).items
    return {f"{o.kind or type(o).__name__}/{o.metadata.name}": o.metadata.uid for o in [*jobs, *pods]}


def _running(run: SimpleNamespace) -> list[client.V1Pod]:
    pods = run.core.list_namespaced_pod(run.namespace, label_selector=WORKLOAD_LABEL).items
    return [p for p in pods if p.status.phase == "Running"]


def _pod_if_running(run: SimpleNamespace, name: str) -> client.V1Pod | None:
    pod = run.core.read_namespaced_pod(name, run.namespace)
    return pod if pod.status.phase == "Running" else None


def _spooling(logs: str) -> bool:
    """The metering watch's own words when it keeps writes on disk (kgwe.cost.metering_watch)."""
    return "keeping writes on disk" in logs or "spooling writes" in logs


def _ready_status(run: SimpleNamespace) -> str | None:
    conditions = (_repository(run).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


def _node_marks(node: client.V1Node) -> dict[str, Any]:
    """A pool node as the previous version's rollout left it: its MIG labels and KGWE's annotations."""
    labels = {k: v for k, v in node.metadata.labels.items() if k.startswith("nvidia.com/mig")}
    annotations = {
        k: v
        for k, v in (node.metadata.annotations or {}).items()
        if k.startswith("kgwe.nvidia.io/") and k != "kgwe.nvidia.io/topology"
    }
    metadata = {"name": node.metadata.name, "labels": labels, "annotations": annotations}
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata}


def _compat_dump(run: SimpleNamespace) -> dict[str, list[dict[str, Any]]]:
    """What the previous version's controllers wrote: the PolicyRepository, the GPUWorkloads, nodes' marks."""

    def clean(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        keep = ("name", "namespace", "labels", "annotations", "finalizers", "generation")
        return {**obj, "metadata": {k: meta[k] for k in keep if k in meta}}

    workloads = run.custom.list_namespaced_custom_object(*GW, run.namespace, "gpuworkloads")["items"]
    pool = run.core.list_node(label_selector="kgwe.nvidia.io/pool=inference").items
    marked = [n for n in pool if REQUESTED_AT_ANNOTATION in (n.metadata.annotations or {})]
    return {
        "policyrepository.yaml": [clean(_repository(run))],
        "gpuworkloads.yaml": [clean(w) for w in workloads],
        "nodes.yaml": [_node_marks(n) for n in marked[:2]],
    }


def test_upgrade_mid_rollout_with_metering_spooled_and_workloads_running_then_uninstall(upgrade):
    run, api, core = upgrade, upgrade.api, upgrade.core
    mig = run.cluster.mig_manager
    assert mig is not None
    # GPUWorkloads running (their pods held Running by the simulated kubelet)
    for name in ("train-a", "train-b"):
        workload = _workload(name, run.namespace)
        run.custom.create_namespaced_custom_object(*GW, run.namespace, "gpuworkloads", workload)
    wait("the GPUWorkloads' pods running", lambda: len(_running(run)) == 2, 300, run.state)
    children = _children(run)
    # a pod holds a GPU of one pool node: the rollout will have to wait for it
    core.create_namespaced_pod(run.namespace, _held_pod("busy", BUSY_NODE, "nvidia.com/mig-1g.10gb"))
    wait("the busy pod running", lambda: _pod_if_running(run, "busy"), 120)

    # the cost store goes down; a pod runs and ends meanwhile: its metering waits in the leader's spool
    run.postgres.halt()
    core.create_namespaced_pod(run.namespace, _held_pod("spooled", A100, "nvidia.com/gpu"))
    spooled = wait("the spooled pod running", lambda: _pod_if_running(run, "spooled"), 120)
    finish_held_pod(api, spooled)
    wait("the leader spooling metering writes", lambda: _spooling(_controller_logs(run)), 120)

    # the policy: a MIG rollout over the pool, 2 nodes at a time, each apply taking a while
    mig.delay_seconds = MIG_APPLY_SECONDS
    applied_before = len(mig.applies)
    spec = {"url": run.git.url("policy.git"), "ref": {"branch": "main"}, "interval": "5s", "timeout": "20s"}
    meta = {"apiVersion": "kgwe.nvidia.io/v1", "kind": "PolicyRepository", "metadata": {"name": "gpu-policy"}}
    run.custom.create_namespaced_custom_object(*PR, {**meta, "spec": spec})

    def mid_rollout() -> dict[str, Any] | None:
        r = _rollout(run)
        busy_waits = r.get("waitingBusy") == [BUSY_NODE]
        return r if r.get("done", 0) >= 2 and r.get("inProgress") and busy_waits else None

    mid = wait("the rollout mid-way: nodes done, nodes applying, one waiting", mid_rollout, 300, run.state)
    quota = core.read_namespaced_resource_quota(BUDGET_QUOTA_NAME, run.namespace)
    before = _repository(run)
    assert POLICY_REPOSITORY_FINALIZER not in (before["metadata"].get("finalizers") or [])  # the old one's
    dump = _compat_dump(run)
    assert [read_spec(doc).deletion_policy for doc in dump["policyrepository.yaml"]] == ["Delete"]
    if os.environ.get("KGWE_WRITE_COMPAT_FIXTURES") == "1":
        COMPAT_OUT.mkdir(parents=True, exist_ok=True)
        for file, docs in dump.items():
            (COMPAT_OUT / file).write_text(yaml.safe_dump_all(docs, sort_keys=False))

    # the upgrade, to this checkout's chart and image
    started = time.monotonic()
    upgraded = helm(
        "upgrade", "kgwe", str(CHART_DIR), "--namespace", NS, "--reset-then-reuse-values",
        "--set", f"image.repository={chart_image_reference().rsplit(':', 1)[0]}",
        "--wait", "--timeout", "10m", env=run.env, check=False,
    )  # fmt: skip
    assert upgraded.returncode == 0, f"{upgraded.stderr}\n{run.state()}"
    run.figures["helm_upgrade_seconds"] = round(time.monotonic() - started, 1)
    run.figures["nodes_in_flight_at_upgrade"] = len(mid["inProgress"])
    images = {
        c.image
        for p in core.list_namespaced_pod(NS).items
        if p.metadata.deletion_timestamp is None
        for c in p.spec.containers
        if "/kgwe" in c.image
    }
    assert images == {chart_image_reference()}, images

    # the cost store comes back; the busy pod ends: the rollout finishes under the new controller
    run.postgres.resume()
    finish_held_pod(api, core.read_namespaced_pod("busy", run.namespace))
    mig.delay_seconds = 1.0
    wait("the PolicyRepository Ready under the new controller", lambda: _ready_status(run) == "True", 420)
    after = _repository(run)
    assert POLICY_REPOSITORY_FINALIZER in after["metadata"]["finalizers"], "the new controller added it"
    assert after["status"]["lastAppliedRevision"] == before["status"]["lastAppliedRevision"]
    applies = mig.applies[applied_before:]
    per_node = {n: [c for node, c in applies if node == n] for n in POOL_NODES}
    assert all(len(configs) == 1 for configs in per_node.values()), (
        f"each node repartitioned once: {per_node}"
    )
    assert core.read_namespaced_resource_quota(BUDGET_QUOTA_NAME, run.namespace).spec.hard == quota.spec.hard

    # nothing lost, nothing repeated: the GPUWorkloads kept their Jobs and pods, each pod metered once
    assert _children(run) == children
    pods = _running(run)
    assert len(pods) == 2 and all(
        c.restart_count == 0 for p in pods for c in p.status.container_statuses or []
    )
    store = CostStore(run.postgres.url)
    window = Period(datetime.now(UTC) - timedelta(days=1), datetime.now(UTC) + timedelta(hours=1))

    def metered() -> dict[str, list[Any]] | None:
        by_uid: dict[str, list[Any]] = {}
        for iv in store.usage(window):
            by_uid.setdefault(iv.pod_uid, []).append(iv)
        return by_uid if spooled.metadata.uid in by_uid else None

    by_uid = wait("the spooled pod metered once the store is back", metered, 240)
    assert all(len(ivs) == 1 for ivs in by_uid.values()), {u: len(v) for u, v in by_uid.items() if len(v) > 1}
    [blip] = by_uid[spooled.metadata.uid]
    ended = core.read_namespaced_pod("spooled", run.namespace)
    assert blip.start == spooled.status.start_time and blip.end is not None
    assert blip.end == max(s.state.terminated.finished_at for s in ended.status.container_statuses)
    assert {p.metadata.uid for p in pods} <= set(by_uid), "every running GPUWorkload pod metered"

    # uninstall while the GPUWorkloads run: what KGWE wrote is released, the workloads run on
    started = time.monotonic()
    out = helm("uninstall", "kgwe", "--namespace", NS, "--wait", "--timeout", "8m", env=run.env, check=False)
    run.uninstalled = True
    assert out.returncode == 0, f"{out.stderr}\n{run.state()}"
    run.figures["helm_uninstall_seconds"] = round(time.monotonic() - started, 1)
    with pytest.raises(ApiException) as gone:
        _repository(run)
    assert gone.value.status == 404
    wait("KGWE's pods gone, the hooks' too", lambda: not core.list_namespaced_pod(NS).items, 180, run.state)
    for node in POOL_NODES:
        meta = core.read_node(node).metadata
        assert meta.labels[MIG_CONFIG_LABEL] == MIG_ALL_DISABLED, node
        assert not {REQUESTED_AT_ANNOTATION, ROLLOUT_REVISION_ANNOTATION} & set(meta.annotations or {}), node
    rbac = client.RbacAuthorizationV1Api(api)
    for read in (
        lambda: core.read_namespaced_resource_quota(BUDGET_QUOTA_NAME, run.namespace),
        lambda: core.read_namespaced_config_map("kgwe-mig-parted-config", "gpu-operator"),
        lambda: rbac.read_namespaced_role_binding(WORKLOAD_ROLEBINDING, run.namespace),
    ):
        with pytest.raises(ApiException) as missing:
            read()
        assert missing.value.status == 404
    assert {p.metadata.uid for p in _running(run)} == {p.metadata.uid for p in pods}, "the workloads run on"
    with contextlib.suppress(ApiException):
        core.delete_namespace(run.namespace)
