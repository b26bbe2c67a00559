"""`kgwe cluster up` / `status` / `down` as a person runs them (subprocesses): what `up` gives, that a second
`up` and a non-root `up` fail with one clear line, and that `down` — also after the supervisor was killed —
leaves nothing on the host: no process, mount, network device, nftables rule, changed kernel setting, cgroup
or file under the node's fixed paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client, config

from kgwe.localcluster.cluster import ClusterRecord, chart_image_reference
from kgwe.localcluster.controlplane import CLUSTER_DNS_IP
from kgwe.localcluster.gpunodes import GPU_NODE_TAINT
from kgwe.localcluster.nodeimages import KUBE_SCHEDULER_REPOSITORY
from kgwe.localcluster.ociimage import ImageFile, ImageSpec, write_oci_archive
from kgwe.localcluster.realnode import CONTAINERD_ADDRESS, NODE_NAME
from tests.harness.realnode import BUSYBOX, differences, host_state

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]
INVENTORY_NODES = 20  # sample-repo's inventory


def kgwe(*args: str, timeout: float = 900, user: int | None = None) -> subprocess.CompletedProcess[str]:
    prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user is not None else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "kgwe.cli", "cluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
    )


def _images(directory: Path) -> set[str]:
    ctr = Path(_node_binaries_dir(directory)) / "ctr"
    out = subprocess.run(
        [str(ctr), f"--address={CONTAINERD_ADDRESS}", "--namespace=k8s.io", "images", "list", "--quiet"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def _node_binaries_dir(directory: Path) -> str:
    import json

    return str(
        json.loads((directory / "cluster-request.json").read_text())["node_binaries"]["containerd_dir"]
    )


def _a_kgwe_image(tmp: Path) -> tuple[Path, str]:
    """An archive named like a KGWE image built under another name (here busybox inside)."""
    reference = "registry.example.com/team/kgwe:test"
    archive = tmp / "kgwe-test.oci.tar"
    write_oci_archive(ImageSpec(reference, [ImageFile("/bin/busybox", BUSYBOX)], ["/bin/busybox"]), archive)
    return archive, reference


def test_up_gives_a_cluster_and_down_leaves_nothing(host_free_of_real_node: None, tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    archive, reference = _a_kgwe_image(tmp_path)
    before = host_state((directory,))
    up = kgwe("up", "--dir", str(directory), "--image", str(archive))
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        assert up.stdout.splitlines()[-1] == f"export KUBECONFIG={directory / 'kubeconfig'}"
        assert "Traceback" not in up.stderr

        status = kgwe("status")
        assert status.returncode == 0, status.stdout
        assert (
            f"{INVENTORY_NODES + 1} of {INVENTORY_NODES + 1} Ready (1 real, {INVENTORY_NODES} kwok)"
            in status.stdout
        )

        api = config.new_client_from_config(str(directory / "kubeconfig"))
        core = client.CoreV1Api(api)
        nodes = {n.metadata.name: n for n in core.list_node().items}
        assert NODE_NAME in nodes and len(nodes) == INVENTORY_NODES + 1
        gpu_nodes = [n for name, n in nodes.items() if name != NODE_NAME]
        assert all(n.metadata.labels.get("nvidia.com/gpu.present") == "true" for n in gpu_nodes)
        assert all(GPU_NODE_TAINT["key"] in {t.key for t in n.spec.taints or []} for n in gpu_nodes)
        assert any("nvidia.com/mig-1g.10gb" in n.status.allocatable for n in gpu_nodes)  # the inventory's MIG
        assert not (nodes[NODE_NAME].spec.taints or [])
        assert core.read_namespace("gpu-operator").status.phase == "Active"
        assert client.NodeV1Api(api).read_runtime_class("nvidia").handler == "nvidia"
        assert core.read_namespaced_service("kube-dns", "kube-system").spec.cluster_ip == CLUSTER_DNS_IP
        images = _images(directory)
        assert reference in images and chart_image_reference() in images  # also under the chart's default
        assert any(i.startswith(KUBE_SCHEDULER_REPOSITORY + ":") for i in images)

        again = kgwe("up", "--dir", str(tmp_path / "second"))
        assert again.returncode == 1
        assert (
            again.stderr.strip()
            .splitlines()[-1]
            .startswith("kgwe cluster: error: a local cluster already runs")
        )
        assert "Traceback" not in again.stderr
        assert not (tmp_path / "second").exists()
        still = kgwe("status")  # the first cluster is untouched
        assert f"{INVENTORY_NODES + 1} of {INVENTORY_NODES + 1} Ready" in still.stdout
    finally:
        down = kgwe("down")
    assert down.returncode == 0, down.stderr
    assert not directory.exists()
    assert differences(before, host_state((directory,))) == {}


def test_down_sweeps_after_the_supervisor_was_killed(host_free_of_real_node: None, tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    before = host_state((directory,))
    up = kgwe("up", "--dir", str(directory))
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        record = ClusterRecord.read()
        assert record is not None
        os.kill(record.pid, signal.SIGKILL)  # no teardown of its own: the kernel stops its children
        deadline = time.monotonic() + 30
        while (
            Path(f"/proc/{record.pid}/cmdline").exists() and Path(f"/proc/{record.pid}/cmdline").read_bytes()
        ):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert host_state((directory,))["mounts"], "containers and their mounts outlive their supervisor"
    finally:
        down = kgwe("down")
    assert down.returncode == 0, down.stderr
    assert differences(before, host_state((directory,))) == {}


def test_up_as_a_normal_user_says_it_needs_root(tmp_path: Path) -> None:
    result = kgwe("up", "--dir", str(tmp_path / "c"), user=65534, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "kgwe cluster: error: `kgwe cluster up` needs root: its real node runs containerd, runc, a kubelet "
        "and kube-proxy and sets up a bridge and nftables rules (run it as root, e.g. in a VM)"
    ]


def test_up_with_a_missing_image_archive_fails_before_starting_anything(tmp_path: Path) -> None:
    result = kgwe("up", "--dir", str(tmp_path / "c"), "--image", str(tmp_path / "nope.tar"), timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"kgwe cluster: error: --image {tmp_path / 'nope.tar'}: no such file"
    ]
    assert not (tmp_path / "c").exists()
