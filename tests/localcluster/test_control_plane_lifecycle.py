"""Starting and stopping the control plane leaves nothing behind; build prerequisites fail loudly."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.localcluster.controlplane import (
    BUILD_SCRIPT,
    ControlPlane,
    ControlPlaneError,
    baseline_scheduler_config,
    default_scheduler_config,
    find_binaries,
    free_port,
)
from tests.harness.pytest_cluster import delete_namespace
from tests.harness.waiting import wait_for


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.cluster
def test_stop_kills_every_process_and_removes_temp_dirs(control_plane: ControlPlane) -> None:
    cp = ControlPlane(control_plane.binaries, start_scheduler=True)
    cp.start()
    try:
        pids = cp.pids
        workdir = cp.workdir
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
        assert all(_alive(p) for p in pids.values())
        assert cp.version()["gitVersion"] == cp.binaries.kubernetes_version
        kept = cp.keep_logs()
    finally:
        cp.stop()
    assert not [name for name, pid in pids.items() if _alive(pid)]
    assert workdir is not None and not workdir.exists()
    assert (kept / "kube-apiserver.log").stat().st_size > 0
    shutil.rmtree(kept)


def test_build_script_without_go_says_what_to_install(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KGWE_CACHE_DIR": str(tmp_path / "cache")}
    if shutil.which("go", path=env["PATH"]):
        pytest.fail("this test needs a PATH without go; /usr/bin or /bin has one")
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "Go is not installed" in proc.stderr
    assert "go.dev/dl" in proc.stderr


def test_binary_dir_override_must_be_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGWE_K8S_BIN_DIR", str(tmp_path))
    with pytest.raises(ControlPlaneError, match="MANIFEST"):
        find_binaries()


@pytest.mark.cluster
def test_scheduler_runs_with_a_given_configuration(
    control_plane: ControlPlane, k8s_api: client.ApiClient, namespace: str, gpu_node: Any
) -> None:
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("L40S-8-PCIE")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "custom"},
        "spec": {
            "schedulerName": "kgwe-custom",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "c", "image": "x"}],
        },
    }
    core.create_namespaced_pod(namespace, pod)
    config = default_scheduler_config(profiles=[{"schedulerName": "kgwe-custom"}])
    with control_plane.using_scheduler_config(config):
        assert "kgwe-custom" in (control_plane.workdir / "kube-scheduler.yaml").read_text()
        wait_for(
            "the pod of the custom scheduler profile bound",
            lambda: core.read_namespaced_pod("custom", namespace).spec.node_name == node,
            30,
        )
    assert "kgwe-custom" not in (control_plane.workdir / "kube-scheduler.yaml").read_text()


@pytest.mark.cluster
def test_namespace_cleanup_removes_pods_and_the_namespace(k8s_api: client.ApiClient, gpu_node: Any) -> None:
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-1-V100")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="cleanup-check")))
    wait_for(
        "the default ServiceAccount", lambda: core.list_namespaced_service_account("cleanup-check").items, 30
    )
    core.create_namespaced_pod(
        "cleanup-check",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
        },
    )
    delete_namespace(core, "cleanup-check")
    # kube-controller-manager's namespace controller empties and finalizes it in the background.

    def finalized() -> bool:
        try:
            core.read_namespace("cleanup-check")
        except ApiException as err:
            assert err.status == 404
            return True
        return False

    wait_for("the namespace finalized", finalized, 60)
    assert not core.list_namespaced_pod("cleanup-check").items


def test_without_go_and_without_cache_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KGWE_K8S_BIN_DIR", raising=False)
    monkeypatch.setenv("KGWE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-go-here"))
    with pytest.raises(ControlPlaneError, match=r"Install Go >= 1\.26"):
        find_binaries()


def test_build_script_with_old_go_says_it_is_too_old(tmp_path: Path) -> None:
    fake_go = tmp_path / "bin" / "go"
    fake_go.parent.mkdir()
    fake_go.write_text("#!/bin/sh\necho go1.24.3\n")  # answers `go env GOVERSION` like an old toolchain
    fake_go.chmod(0o755)
    env = {"PATH": f"{fake_go.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "go1.24.3 is too old" in proc.stderr
    assert "Go >= 1.26" in proc.stderr


@pytest.mark.cluster
def test_scheduler_accepts_an_extenders_entry(
    control_plane: ControlPlane, k8s_api: client.ApiClient, namespace: str, gpu_node: Any
) -> None:
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-A100")
    extender = {
        "urlPrefix": f"http://127.0.0.1:{free_port()}/kgwe",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "weight": 1,
        "nodeCacheCapable": True,
        "ignorable": True,  # nothing listens there: an ignorable extender must not block scheduling
        "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
    }
    with control_plane.using_scheduler_config(baseline_scheduler_config(extenders=[extender])):
        text = (control_plane.workdir / "kube-scheduler.yaml").read_text()
        assert "urlPrefix" in text and "/kgwe" in text
        core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "via-extender"},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                },
            },
        )
        wait_for(
            "the pod bound with an ignorable, unreachable extender",
            lambda: core.read_namespaced_pod("via-extender", namespace).spec.node_name == node,
            30,
        )
    assert "urlPrefix" not in (control_plane.workdir / "kube-scheduler.yaml").read_text()
