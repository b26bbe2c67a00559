"""A local Kubernetes cluster to install KGWE into, as into kind, without Docker (needs root).

  kgwe cluster up [--image OCI_ARCHIVE ...] [--inventory FILE] [--dir DIR] [--gpu-profile [PROFILE]]
  kgwe cluster status
  kgwe cluster fail-gpu GPU --mode ecc_uncorrectable|lost|fallen_off_bus [--xid N]
  kgwe cluster down

`up` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler, the host's real node
(containerd, runc, kubelet, kube-proxy in nftables mode, a CNI bridge) with CoreDNS as the cluster DNS, and
kwok GPU nodes from a GPUInventory (sample-repo's by default) with the GPU Operator's labels, resources and
taint, its MIG manager and device-plugin stand-ins, the `gpu-operator` namespace and the RuntimeClass
`nvidia`. It imports every --image archive into the node's containerd (nothing is pulled: there may be no
registry), plus the kube-scheduler image KGWE's chart runs. It returns when everything is Ready; its last
line is `export KUBECONFIG=PATH` (the only line on stdout: `eval "$(kgwe cluster up)"` works). The cluster
keeps running until `kgwe cluster down`, which stops it and leaves nothing behind.

With `--gpu-profile PROFILE` (alone: h100) the real node is also a GPU node run by NVIDIA's own code: NVIDIA's
mock NVML library with that GPU profile in the driver root, NVIDIA's device plugin, GPU Feature Discovery
and config-manager as the GPU Operator runs them (built from NVIDIA's sources by hack/nvidia-bins.sh); `up`
returns once the node advertises the profile's GPUs. `fail-gpu` injects a failure into one of its GPUs
through the mock and restarts NVIDIA's plugin in place so it reads its GPUs again; for an uncorrectable ECC
error with a critical Xid, until the plugin has withdrawn that GPU (docs/nvidia-stack.md).

Example:
  eval "$(kgwe cluster up --image build/image/kgwe-0.1.0.oci.tar)"
  helm install kgwe deploy/helm/kgwe --namespace kgwe-system --create-namespace
  kgwe cluster down
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.localcluster.cluster import (
    CLUSTER_RECORD,
    REQUEST_FILE,
    ClusterRecord,
    ClusterRequest,
    default_inventory,
    load_inventory_nodes,
)
from kgwe.localcluster.mocknvml import DEFAULT_GPU_PROFILE, FAILURE_MODES
from kgwe.localcluster.privatefiles import UnsafePath, check_directory, make_directory
from kgwe.runtime.conditions import is_true

STOP_TIMEOUT_SECONDS = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start the local cluster; prints `export KUBECONFIG=PATH` last")
    up.add_argument(
        "--image",
        action="append",
        type=Path,
        default=[],
        metavar="OCI_ARCHIVE",
        help="an OCI image archive to import into the node (repeatable; e.g. `make image`'s)",
    )
    up.add_argument(
        "--inventory",
        type=Path,
        metavar="FILE",
        help="GPUInventory for the kwok GPU nodes (default: sample-repo's)",
    )
    up.add_argument(
        "--dir", type=Path, metavar="DIR", help=f"work directory (default: {default_directory()})"
    )
    up.add_argument(
        "--mig-delay",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds the MIG manager stand-in takes",
    )
    up.add_argument(
        "--gpu-profile",
        nargs="?",
        const=DEFAULT_GPU_PROFILE,
        default="",
        metavar="PROFILE",
        help=f"make the real node a GPU node with NVIDIA's device plugin, GFD and mock NVML "
        f"(h100, a100, gb200, gb300, b200, l40s, t4; alone: {DEFAULT_GPU_PROFILE})",
    )
    up.add_argument(
        "--timeout", type=float, default=600.0, metavar="SECONDS", help="give up starting after this"
    )
    sub.add_parser("down", help="stop the local cluster and remove what it left on the host")
    sub.add_parser("status", help="whether a local cluster runs, and where")
    fail = sub.add_parser("fail-gpu", help="inject a failure into one GPU of the GPU node (--gpu-profile)")
    fail.add_argument("gpu", type=int, metavar="GPU", help="GPU index (0..7)")
    fail.add_argument(
        "--mode", required=True, choices=FAILURE_MODES, help="how the GPU fails (the mock's modes)"
    )
    fail.add_argument("--xid", type=int, metavar="N", help="also deliver this Xid (e.g. 48, 79)")


def default_directory() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "kgwe" / "cluster"


def run(args: argparse.Namespace) -> int:
    if args.action == "up":
        return up(args)
    if args.action == "down":
        return down()
    if args.action == "fail-gpu":
        return fail_gpu(args)
    return status()


def _say(text: str) -> None:
    print(f"kgwe cluster: {text}", file=sys.stderr, flush=True)


def _supervisor_alive(pid: int) -> bool:
    try:
        return b"kgwe.localcluster.cluster" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _running() -> ClusterRecord | None:
    record = ClusterRecord.read()
    return record if record is not None and _supervisor_alive(record.pid) else None


def _check_free() -> None:
    from kgwe.localcluster.realnode import EXCLUSIVE_PROGRAMS, NodeLock, foreign_node_programs

    record = _running()
    if record is not None:
        raise KgweError(
            f"a local cluster already runs (pid {record.pid}, {record.directory}); "
            f"use it (export KUBECONFIG={record.kubeconfig}) or stop it first: kgwe cluster down"
        )
    lock = NodeLock()
    lock.acquire(0)  # fails with who holds it (e.g. a test session's real node)
    lock.release()
    others = foreign_node_programs(None, EXCLUSIVE_PROGRAMS)
    if others:
        raise KgweError(
            f"another Kubernetes node runs on this host ({', '.join(others)}): the local cluster's node "
            "needs /var/lib/kubelet and kube-proxy's nftables tables for itself; stop it first"
        )


def _check_directory(directory: Path) -> None:
    """DIR is root's alone, as every directory above it (kgwe.localcluster.privatefiles): root writes keys
    and logs there."""
    try:
        check_directory(directory)
    except UnsafePath as exc:
        raise KgweError(f"--dir {directory}: {exc}; choose a directory only root can write") from None


def _prepare_directory(directory: Path) -> None:
    """DIR must be new, empty, or what a stopped `cluster up` left (it is then cleared); root's alone."""
    _check_directory(directory)
    if directory.is_dir() and any(directory.iterdir()):
        if not (directory / REQUEST_FILE).is_file():
            raise KgweError(
                f"{directory} is not empty and not a former `kgwe cluster up` directory; choose another --dir"
            )
        shutil.rmtree(directory)
    make_directory(directory)


def _ours(directory: Path) -> bool:
    """A directory `down` may remove: root's alone (not one another user made and named like ours)."""
    try:
        check_directory(directory)
    except UnsafePath:
        return False
    return True


def up(args: argparse.Namespace) -> int:
    from kgwe.localcluster.controlplane import find_binaries
    from kgwe.localcluster.nodebins import find_node_binaries
    from kgwe.localcluster.ociimage import archive_reference

    if os.geteuid() != 0:
        raise KgweError(
            "`kgwe cluster up` needs root: its real node runs containerd, runc, a kubelet and kube-proxy "
            "and sets up a bridge and nftables rules (run it as root, e.g. in a VM)"
        )
    images = [p.resolve() for p in args.image]
    for archive in images:
        if not archive.is_file():
            raise KgweError(f"--image {archive}: no such file")
        if archive_reference(archive) is None:
            raise KgweError(
                f"--image {archive}: the archive names no image reference (index.json annotations)"
            )
    inventory = (args.inventory or default_inventory()).resolve()
    nodes = load_inventory_nodes(inventory)
    directory = (args.dir or default_directory()).resolve()
    _check_directory(directory)
    _check_free()
    t0 = time.monotonic()
    nvidia: dict[str, str] = {}
    if args.gpu_profile:
        from kgwe.localcluster.nvidiabins import find_nvidia_binaries

        _say("building or reusing NVIDIA's device plugin and mock NVML (hack/nvidia-bins.sh)")
        found = find_nvidia_binaries()
        found.profile(args.gpu_profile)  # an unknown profile says which exist, before anything starts
        nvidia = found.to_dict()
    _prepare_directory(directory)
    _say("building or reusing the binaries (hack/cluster-bins.sh, hack/node-bins.sh)")
    node_binaries = find_node_binaries(find_binaries())
    request = ClusterRequest(
        directory=str(directory),
        images=[str(p) for p in images],
        inventory=str(inventory),
        node_binaries=node_binaries.to_dict(),
        mig_delay_seconds=args.mig_delay,
        gpu_profile=args.gpu_profile,
        nvidia_binaries=nvidia,
    )
    (directory / REQUEST_FILE).write_text(json.dumps(asdict(request), indent=1))
    (directory / "logs").mkdir(exist_ok=True)
    log_path = directory / "logs" / "cluster.log"
    read_fd, write_fd = os.pipe()
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kgwe.localcluster.cluster", str(directory), "--status-fd", str(write_fd)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
            start_new_session=True,  # outlives this command and its terminal; `down` stops it
            cwd="/",
        )
    os.close(write_fd)
    try:
        ready_seconds = _follow(proc, read_fd, log_path, deadline=time.monotonic() + args.timeout)
    except BaseException:
        _stop_supervisor(proc.pid)
        raise
    finally:
        os.close(read_fd)
    record = _running()
    server = record.server if record else "?"
    gpu = f" (a GPU node: NVIDIA's stack, mock NVML profile {args.gpu_profile})" if args.gpu_profile else ""
    _say(
        f"ready in {time.monotonic() - t0:.1f}s (the cluster {ready_seconds:.1f}s after the binaries): API "
        f"server {server}; real node kgwe-node{gpu} with CoreDNS; {len(nodes)} kwok GPU nodes; log {log_path}"
    )
    _say("stop it with: kgwe cluster down")
    print(f"export KUBECONFIG={directory / 'kubeconfig'}", flush=True)
    return 0


def _follow(proc: subprocess.Popen[bytes], read_fd: int, log_path: Path, deadline: float) -> float:
    """Relay the supervisor's progress until READY (returns its seconds); ERROR, exit or timeout raise."""
    buffer = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KgweError(f"the cluster was not ready in time; log {log_path}")
        readable, _, _ = select.select([read_fd], [], [], min(remaining, 1.0))
        chunk = os.read(read_fd, 4096) if readable else b""
        if readable and not chunk:
            proc.wait(timeout=STOP_TIMEOUT_SECONDS)
            raise KgweError(
                f"the cluster's supervisor exited (code {proc.returncode}) before it was ready; "
                f"log {log_path}"
            )
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            kind, _, text = line.decode("utf-8", "replace").partition(" ")
            if kind == "STEP":
                _say(text)
            elif kind == "READY":
                return float(text)
            elif kind == "ERROR":
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=STOP_TIMEOUT_SECONDS)
                raise KgweError(f"{text} (log {log_path})")


def _stop_supervisor(pid: int) -> None:
    """SIGTERM the supervisor (it stops the cluster) and wait for it; SIGKILL if it hangs (its components
    then get SIGTERM from the kernel, and the sweep below removes the rest)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while _supervisor_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    if _supervisor_alive(pid):
        _say(f"the supervisor (pid {pid}) did not stop in {STOP_TIMEOUT_SECONDS:.0f}s; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        time.sleep(1.0)


def _stop_processes_using(directory: Path) -> None:
    from kgwe.localcluster.realnode import processes_using

    pids = processes_using(directory)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while (pids := processes_using(directory)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not pids:
            return


def down() -> int:
    from kgwe.localcluster.realnode import NodeLock, sweep_recorded

    if os.geteuid() != 0:
        raise KgweError("`kgwe cluster down` needs root (it removes the node's mounts, devices and rules)")
    record = ClusterRecord.read()
    if record is not None and _supervisor_alive(record.pid):
        _say(f"stopping the cluster (supervisor pid {record.pid}, {record.directory})")
        _stop_supervisor(record.pid)
    if record is not None:  # a killed supervisor's control plane, should any part of it outlive it
        _stop_processes_using(Path(record.directory))
    lock = NodeLock()
    try:
        lock.acquire(0)
    except KgweError as exc:
        if record is None:  # someone else's real node (a test session): not ours to stop
            _say(f"no local cluster is running ({exc})")
            return 0
        raise KgweError(f"cannot sweep the host: {exc}") from None
    try:
        problems = sweep_recorded()
    finally:
        lock.release()
    directories = {default_directory()} | ({Path(record.directory)} if record else set())
    removed = [d for d in directories if _ours(d) and (d / REQUEST_FILE).is_file()]
    for directory in removed:
        shutil.rmtree(directory, ignore_errors=True)
    CLUSTER_RECORD.unlink(missing_ok=True)
    if problems:
        raise KgweError("stopped, but these are left on the host: " + "; ".join(problems))
    if record is None and problems is None and not removed:
        _say("no local cluster is running; nothing to do")
    else:
        _say("stopped; no process, mount, network device, nftables table or node file is left")
    return 0


def fail_gpu(args: argparse.Namespace) -> int:
    """Inject a failure into one GPU of the running GPU node and restart NVIDIA's plugin so it meets it; for
    a failure the plugin withdraws a GPU for, until it has (nvidiastack.fail_and_withdraw)."""
    from kubernetes import config

    from kgwe.localcluster import mocknvml, nvidiastack
    from kgwe.localcluster.realnode import CGROUP_ROOT, NODE_NAME
    from kgwe.vocab import GPU_RESOURCE

    if os.geteuid() != 0:
        raise KgweError("`kgwe cluster fail-gpu` needs root (it writes the node's driver root)")
    record = _running()
    if record is None or not record.gpu_profile:
        raise KgweError("no local GPU node is running: start one with `kgwe cluster up --gpu-profile`")
    cgroup = f"/{CGROUP_ROOT}/"
    watch = f"Watch: kgwe health; kgwe nodes {NODE_NAME} -o wide; kubectl describe node {NODE_NAME}"
    if args.xid is not None and nvidiastack.plugin_withdraws(args.mode, args.xid):
        api = config.new_client_from_config(record.kubeconfig)
        attempts = nvidiastack.fail_and_withdraw(api, cgroup, args.gpu, args.xid)
        _say(
            f"GPU {args.gpu}: {args.mode} with Xid {args.xid} injected (the mock's overrides file); NVIDIA's "
            f"device plugin, restarted in place (SIGHUP; {attempts} time(s)), withdrew it (the node's "
            f"allocatable {GPU_RESOURCE} drops by one). {watch}"
        )
        return 0
    mocknvml.inject_failure(args.gpu, args.mode, args.xid)
    restarted = nvidiastack.restart_device_plugin(cgroup)
    xid = f" with Xid {args.xid}" if args.xid is not None else ""
    _say(
        f"GPU {args.gpu}: {args.mode}{xid} injected (the mock's overrides file); NVIDIA's device plugin "
        f"restarted in place ({restarted} process(es), SIGHUP) to read its GPUs again. {watch}"
    )
    return 0


def status() -> int:
    record = _running()
    if record is None:
        print("no local cluster is running")
        return 1
    from kubernetes import client, config

    uptime = time.time() - record.started if record.started else 0.0
    print(
        f"running: supervisor pid {record.pid}, up {uptime / 60:.0f} min (ready in {record.ready_seconds}s)"
    )
    print(f"  directory  {record.directory}")
    if record.gpu_profile:
        print(
            f"  GPU node   kgwe-node: NVIDIA's device plugin and GFD, mock NVML profile {record.gpu_profile}"
        )
    print(f"  API server {record.server}")
    print(f"  export KUBECONFIG={record.kubeconfig}")
    try:
        api = config.new_client_from_config(record.kubeconfig)
        nodes = client.CoreV1Api(api).list_node(_request_timeout=5).items
    except Exception as exc:  # the API server may be gone while the supervisor still runs
        print(f"  the API server does not answer: {exc}")
        return 1
    ready = [n for n in nodes if is_true(n.status.conditions or [], "Ready")]
    kwok = [n for n in nodes if (n.metadata.annotations or {}).get("kwok.x-k8s.io/node") == "fake"]
    print(
        f"  nodes      {len(ready)} of {len(nodes)} Ready ({len(nodes) - len(kwok)} real, {len(kwok)} kwok)"
    )
    return 0
