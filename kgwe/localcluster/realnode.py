"""One real Kubernetes node on this host: containerd + runc + kubelet + kube-proxy (nftables) + a CNI bridge,
with CoreDNS on it as the cluster's DNS add-on (clusterdns.py).

Pods on it run as in production — pulled from nowhere (every image is imported into containerd's `k8s.io`
namespace first), as non-root users on read-only root filesystems, with configMap/secret/projected/emptyDir
volumes, probes, hostPorts, `kubectl logs` and `exec` — while the GPU nodes beside it stay kwok's. The
apiserver reaches the kubelet at the host's address with a client certificate; the kubelet authenticates as
`system:node:<name>` (Node authorizer, NodeRestriction), kube-proxy as `system:kube-proxy`.

Much of what a node touches is machine-wide (hoststate.py): so there is one real node per host, guarded by a
lock under /run/kgwe; a second start fails with who holds it. What the node changed is recorded there while
it runs, so a crashed run is swept by the next start or by `kgwe cluster down`. Teardown leaves no process,
mount, network namespace or device, nftables table, changed sysctl or file behind.

Settings that matter where CAP_SYS_RESOURCE is missing (VMs and CI runners that drop it): containerd's
`restrict_oom_score_adj` (a sandbox cannot get oom_score_adj -998: without it every sandbox fails with
"can't get final child's PID from pipe") and the kubelet's `oomScoreAdj: 0`. Elsewhere:
`makeIPTablesUtilChains: false` (no canary chains on the host), image-GC thresholds that never evict the
imported images, and `podLogsDir` (`podLogsDirectory` is silently ignored). cgroups v1 specifics live in
cgroups.py.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from kgwe.localcluster import cgroups, hoststate
from kgwe.localcluster.clusterdns import install_cluster_dns
from kgwe.localcluster.controlplane import (
    CLUSTER_DNS_IP,
    CLUSTER_DOMAIN,
    ControlPlane,
    ControlPlaneError,
    free_port,
    kubeconfig_document,
    spawn,
    stop_process_group,
    tail,
)
from kgwe.localcluster.gpunodes import wait_nodes_ready
from kgwe.localcluster.nodebins import NodeBinaries, find_node_binaries
from kgwe.localcluster.nodeimages import NodeImages, image_archives, node_images
from kgwe.localcluster.nvidiabins import NvidiaBinaries
from kgwe.localcluster.ociimage import archive_reference
from kgwe.localcluster.pki import issue
from kgwe.timestamps import format_rfc3339

NODE_NAME = "kgwe-node"
BRIDGE = "kgwe0"
CNI_NETWORK = "kgwe"
CGROUP_ROOT = "kgwe-node"
POD_SUBNET = "10.244.0.0/24"  # this node's pods
CLUSTER_CIDR = "10.244.0.0/16"  # all pods (kube-proxy tells cluster traffic from outside traffic by it)
STATE_DIR = Path("/run/kgwe")
LOCK_FILE = STATE_DIR / "real-node.lock"
RECORD_FILE = STATE_DIR / "real-node.json"
# containerd's sockets: a short fixed path (a socket path holds 108 bytes at most, a work directory may be
# longer); one real node per host makes it unique.
SOCKET_DIR = STATE_DIR / "containerd"
CONTAINERD_ADDRESS = SOCKET_DIR / "containerd.sock"
# The kubelet's own directory, at its usual place: it holds sockets too (pod-resources, plugins), and its
# device-plugin socket is at /var/lib/kubelet whatever --root-dir says.
KUBELET_ROOT = Path("/var/lib/kubelet")
_COMPONENTS = ("containerd", "kubelet", "kube-proxy")


@dataclass
class NodeRecord:
    """What a sweep needs, written under /run/kgwe while a node runs (and read back after a crash)."""

    pid: int  # the process that started the node and holds the lock
    owner: str  # its command line, for "already running" messages
    started: str  # UTC, ISO 8601
    workdir: str
    snapshot: hoststate.HostSnapshot

    def to_json(self) -> str:
        data = asdict(self)
        data["snapshot"] = json.loads(self.snapshot.to_json())
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def read(cls) -> NodeRecord | None:
        try:
            data = json.loads(RECORD_FILE.read_text())
            return cls(
                pid=int(data["pid"]),
                owner=str(data.get("owner", "")),
                started=str(data.get("started", "")),
                workdir=str(data["workdir"]),
                snapshot=hoststate.HostSnapshot.from_json(json.dumps(data.get("snapshot") or {})),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


def holder_description() -> str:
    """Who runs the real node now, from its record (for error messages)."""
    record = NodeRecord.read()
    if record is None:
        return "another process"
    owner = record.owner or "unknown command"
    return f"pid {record.pid} ({owner}), since {record.started}, work dir {record.workdir}"


class NodeLock:
    """The host's one-real-node lock: an flock on /run/kgwe/real-node.lock, released by the kernel when its
    holder dies (so a crash never leaves a stale lock; its leftovers are swept by the next holder)."""

    def __init__(self) -> None:
        self._file: IO[str] | None = None

    def acquire(self, wait_seconds: float = 0.0) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle = LOCK_FILE.open("a+")
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._file = handle
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.close()
                    waited = f" (waited {wait_seconds:.0f}s)" if wait_seconds else ""
                    raise ControlPlaneError(
                        f"a real node already runs on this host{waited}: {holder_description()}. "
                        "One real node per host: stop it first (`kgwe cluster down`), or wait for it."
                    ) from None
                time.sleep(1.0)

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    @property
    def held(self) -> bool:
        return self._file is not None


def processes_using(path: Path) -> list[int]:
    """Processes (other than this one) whose command line names a file under `path`: the node's daemons,
    containerd's shims (`-address <path>/...`), a crashed run's leftovers."""
    prefix = str(path).rstrip("/") + "/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(prefix.encode() in arg for arg in args):
            found.append(int(entry.name))
    return found


# Programs of a Kubernetes node (as /proc/PID/comm shows them: at most 15 characters). Another node on this
# host shares the machine-wide paths, kernel settings and nftables tables with ours (hoststate.py).
NODE_PROGRAMS = ("kubelet", "kube-proxy", "containerd", "containerd-shim")
# Of those, the ones our node cannot run beside: they would share /var/lib/kubelet and kube-proxy's tables.
EXCLUSIVE_PROGRAMS = ("kubelet", "kube-proxy")


def _exited(entry: Path) -> bool:
    """Whether the process has exited and waits to be reaped (a zombie, state Z or X): it keeps its name but
    no command line, files, mounts or tables. A killed node's daemons stay so until their new parent, the
    host's init, reaps them, which some inits do only every few seconds."""
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return True  # gone already
    fields = stat[stat.rfind(")") + 1 :].split()  # "pid (comm) state ...": comm may hold spaces and ')'
    return not fields or fields[0] in ("Z", "X")


def foreign_node_programs(workdir: Path | None, programs: Sequence[str] = NODE_PROGRAMS) -> list[str]:
    """Node programs running on this host that are not the local cluster's (ours name its work dir or its
    containerd socket on their command line), as "kubelet (pid 123)"."""
    ours = set(processes_using(workdir)) if workdir is not None else set()
    ours |= set(processes_using(SOCKET_DIR))
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ours or int(entry.name) == os.getpid():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm in programs and not _exited(entry):
            found.append(f"{comm} (pid {entry.name})")
    return found


def _kill(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def sweep(workdir: Path, snapshot: hoststate.HostSnapshot | None) -> list[str]:
    """Put the host back as `snapshot` found it after a node that ran in `workdir`: kill its processes and
    containers, unmount, delete its network devices and nftables tables, restore sysctls, remove its
    cgroups and files. Returns what could not be cleaned (empty when all is gone)."""
    problems: list[str] = []
    # Another node on this host (a kubelet, kube-proxy or containerd that is not ours) uses the fixed paths,
    # kernel settings and nftables tables too: then only what is ours alone is removed, and the rest said.
    others = foreign_node_programs(workdir)
    cgroups.kill_all(CGROUP_ROOT)  # the containers (they are in no process group of ours)
    # Then whatever still names the work dir or containerd's socket: the shims (they outlive containerd by
    # design), and after a crash the daemons themselves.
    deadline = time.monotonic() + 10
    while (left := processes_using(workdir) + processes_using(SOCKET_DIR)) and time.monotonic() < deadline:
        _kill(left, signal.SIGKILL)
        time.sleep(0.05)
    if left:
        problems.append(f"processes still running: {left}")
    shared = [] if others else list(hoststate.FIXED_PATHS)
    problems += [f"still mounted: {m}" for m in hoststate.unmount_under([workdir, *shared])]
    for link in hoststate.links_with_master(BRIDGE):
        hoststate.delete_link(link)
    hoststate.delete_link(BRIDGE)
    if hoststate.link_exists(BRIDGE):
        problems.append(f"network device {BRIDGE} still exists")
    if others:
        problems.append(
            f"left as they are, since {', '.join(others)} of another node on this host uses them too: "
            f"{', '.join(str(p) for p in hoststate.FIXED_PATHS)}, kernel settings and nftables tables"
        )
    else:
        problems += [f"nftables table left: {t}" for t in hoststate.delete_nft_tables(snapshot)]
    problems += [f"cgroup left: {c}" for c in cgroups.remove_root(CGROUP_ROOT)]
    if snapshot is not None and not others:
        problems += [f"sysctl not restored: {s}" for s in hoststate.restore_sysctls(snapshot)]
        hoststate.sweep_fixed_paths(snapshot)
    shutil.rmtree(SOCKET_DIR, ignore_errors=True)
    shutil.rmtree(workdir, ignore_errors=True)
    if workdir.exists():
        problems.append(f"could not remove {workdir}")
    return problems


def sweep_recorded() -> list[str] | None:
    """Sweep what a node whose owner died left behind (call with the lock held). None when no record."""
    record = NodeRecord.read()
    if record is None:
        return None
    problems = sweep(Path(record.workdir), record.snapshot)
    RECORD_FILE.unlink(missing_ok=True)
    return problems


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is a JSON string for what we write
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def toml_document(table: dict[str, Any], prefix: str = "") -> str:
    """A TOML document from nested dicts (tables) of str/int/bool/list values."""
    scalars = [f"{k} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    parts = ["\n".join(scalars)] if scalars else []
    for key, value in table.items():
        if isinstance(value, dict):
            name = (
                f"{prefix}.{json.dumps(key) if '.' in key else key}"
                if prefix
                else (json.dumps(key) if "." in key else key)
            )
            body = toml_document(value, name)
            parts.append(f"[{name}]\n{body}" if body else f"[{name}]")
    return "\n\n".join(p for p in parts if p)


class RealNode:
    """The host's real node, joined to `control_plane` (the ControlPlane's `real_node`).

    `images`: OCI archives to import besides the node's own (pause, CoreDNS, kube-scheduler), each under the
    reference it carries. `lock_wait_seconds`: how long to wait for another real node on this host to go
    before failing (0: fail at once, with who holds it). `nvidia` and `gpu_profile`: make it a GPU node
    (nvidiastack.py): NVIDIA's mock NVML with that profile in the driver root, the `nvidia` runtime handler,
    NVIDIA's device-plugin image.
    """

    def __init__(
        self,
        control_plane: ControlPlane,
        workdir: Path,
        *,
        binaries: NodeBinaries | None = None,
        images: Sequence[Path] = (),
        lock_wait_seconds: float = 0.0,
        name: str = NODE_NAME,
        start_timeout_seconds: float = 90.0,
        nvidia: NvidiaBinaries | None = None,
        gpu_profile: str = "",
    ) -> None:
        self.cp = control_plane
        self.workdir = workdir
        self.name = name
        self.extra_images = list(images)
        self.lock_wait_seconds = lock_wait_seconds
        self.start_timeout_seconds = start_timeout_seconds
        self._binaries = binaries
        self.nvidia = nvidia
        self.gpu_profile = gpu_profile
        self._lock = NodeLock()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._snapshot: hoststate.HostSnapshot | None = None
        self.kubelet_port = 0
        self.kubelet_healthz_port = 0
        self.kube_proxy_healthz_port = 0
        self.imported: dict[str, str] = {}  # reference -> archive it came from
        self.teardown_problems: list[str] = []
        self.images: NodeImages | None = None
        self._import_error: Exception | None = None

    # ---- paths ----------------------------------------------------------------------------------
    @property
    def containerd_address(self) -> Path:
        return CONTAINERD_ADDRESS

    @property
    def kubelet_dir(self) -> Path:
        return KUBELET_ROOT

    @property
    def binaries(self) -> NodeBinaries:
        assert self._binaries is not None, "node not started"
        return self._binaries

    def log_paths(self) -> dict[str, Path]:
        return {name: self.cp.logs_dir / f"{name}.log" for name in self._procs}

    # ---- lifecycle ------------------------------------------------------------------------------
    def start(self) -> RealNode:
        if os.geteuid() != 0:
            raise ControlPlaneError(
                "the real node needs root: it runs containerd, runc, a kubelet and kube-proxy, and sets up "
                "a network bridge and nftables rules (run as root, e.g. in a VM or a CI runner)"
            )
        self._binaries = self._binaries or find_node_binaries(self.cp.binaries)
        self.images = node_images(self._binaries)
        archives = image_archives(self._binaries)  # before the lock: a first run writes them
        if self.nvidia is not None:
            from kgwe.localcluster import nvidiastack

            archives.append(nvidiastack.image_archive(self.nvidia))
        self._lock.acquire(self.lock_wait_seconds)
        try:
            others = foreign_node_programs(self.workdir, EXCLUSIVE_PROGRAMS)
            if others:
                raise ControlPlaneError(
                    f"another Kubernetes node runs on this host ({', '.join(others)}): the real node needs "
                    f"{KUBELET_ROOT} and kube-proxy's nftables tables for itself; stop it first"
                )
            leftovers = sweep_recorded()
            if leftovers:
                raise ControlPlaneError(
                    "a real node that ran before on this host left things that cannot be removed: "
                    + "; ".join(leftovers)
                )
            self._snapshot = hoststate.take_snapshot()
            self.workdir.mkdir(parents=True, exist_ok=True)
            RECORD_FILE.write_text(
                NodeRecord(
                    pid=os.getpid(),
                    owner=" ".join(Path(f"/proc/{os.getpid()}/cmdline").read_text().split("\0")).strip(),
                    started=format_rfc3339(dt.datetime.now(dt.UTC)),
                    workdir=str(self.workdir),
                    snapshot=self._snapshot,
                ).to_json()
            )
            cgroups.create_root(CGROUP_ROOT)
            if self.nvidia is not None:
                from kgwe.localcluster.mocknvml import install_driver_root

                install_driver_root(self.nvidia, self.gpu_profile)
            self._start_containerd()
            for archive, reference in archives:
                self.import_image(archive, reference)
            # The other images (KGWE's is hundreds of MB) import while the kubelet, kube-proxy and CoreDNS
            # start: nothing of the node's own needs them.
            importer = threading.Thread(target=self._import_extra_images, name="image-import", daemon=True)
            importer.start()
            self._start_kubelet()
            self._start_kube_proxy()
            install_cluster_dns(self.cp.api_client(), self.images.coredns, self.start_timeout_seconds)
            importer.join()
            if self._import_error is not None:
                raise self._import_error
        except BaseException:
            self.stop()
            raise
        return self

    def _import_extra_images(self) -> None:
        try:
            for archive in self.extra_images:
                self.import_image(archive)
        except Exception as exc:  # raised in start(), from the main thread
            self._import_error = exc

    def stop(self) -> list[str]:
        """Stop everything and sweep the host; returns what could not be cleaned (also kept in
        `teardown_problems`)."""
        if not self._lock.held:
            return []
        for name in reversed(_COMPONENTS):
            proc = self._procs.get(name)
            if proc is not None:
                stop_process_group(proc)
        self.teardown_problems = sweep(self.workdir, self._snapshot)
        RECORD_FILE.unlink(missing_ok=True)
        self._lock.release()
        return self.teardown_problems

    # ---- containerd -----------------------------------------------------------------------------
    def _containerd_config(self) -> dict[str, Any]:
        base = self.workdir / "containerd"
        cni_conf = self.workdir / "cni" / "net.d"
        assert self.images is not None
        runc_options = {
            "BinaryName": str(self.binaries.runc),
            "SystemdCgroup": False,
            "Root": str(base / "runc"),
        }
        runtimes: dict[str, Any] = {
            "runc": {"runtime_type": "io.containerd.runc.v2", "options": runc_options}
        }
        if self.nvidia is not None:
            from kgwe.localcluster import nvidiastack

            runtimes[nvidiastack.RUNTIME_HANDLER] = nvidiastack.runtime_handler(
                runc_options, self.base_spec_path
            )
        return {
            "version": 3,
            "root": str(base / "root"),
            "state": str(base / "state"),
            "imports": [],
            # no NRI socket under /var/run/nri, no /opt/containerd: nothing the node does needs them
            "disabled_plugins": ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt"],
            "grpc": {"address": str(self.containerd_address)},
            "ttrpc": {"address": f"{self.containerd_address}.ttrpc"},
            "plugins": {
                "io.containerd.cri.v1.images": {
                    "snapshotter": "overlayfs",
                    "pinned_images": {"sandbox": self.images.pause},
                    "registry": {"config_path": ""},
                },
                "io.containerd.cri.v1.runtime": {
                    "restrict_oom_score_adj": True,
                    "netns_mounts_under_state_dir": True,
                    "enable_unprivileged_ports": True,  # non-root pods may bind ports < 1024 (CoreDNS on 53)
                    "cdi_spec_dirs": [],
                    "containerd": {"default_runtime_name": "runc", "runtimes": runtimes},
                    "cni": {
                        "bin_dirs": [str(self.binaries.cni_dir)],
                        "conf_dir": str(cni_conf),
                        "max_conf_num": 1,
                    },
                },
                "io.containerd.grpc.v1.cri": {
                    "stream_server_address": "127.0.0.1",
                    "stream_server_port": "0",
                },
            },
        }

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": CNI_NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,  # pods reach beyond the host (the host's DNS servers for CoreDNS)
                    "ipMasqBackend": "nftables",
                    "hairpinMode": True,  # a pod reaches itself through its own Service
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.workdir / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}, "backend": "nftables"},
            ],
        }

    def _start_containerd(self) -> None:
        base = self.workdir / "containerd"
        (self.workdir / "cni" / "net.d").mkdir(parents=True, exist_ok=True)
        (self.workdir / "cni" / "net.d" / f"10-{CNI_NETWORK}.conflist").write_text(
            json.dumps(self._cni_config(), indent=1)
        )
        base.mkdir(parents=True, exist_ok=True)
        SOCKET_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Image content and unpacked layers in memory: importing a large image writes nothing to disk, and
        # teardown drops it in one unmount instead of deleting hundreds of thousands of files.
        (base / "root").mkdir(exist_ok=True)
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "mode=0700", "kgwe-containerd", str(base / "root")],
            capture_output=True,
            text=True,
            check=False,
        )
        if mounted.returncode != 0:
            raise ControlPlaneError(f"cannot mount a tmpfs for containerd's images: {mounted.stderr.strip()}")
        if self.nvidia is not None:
            self._write_nvidia_base_spec()
        config = base / "config.toml"
        config.write_text(toml_document(self._containerd_config()) + "\n")
        self._spawn("containerd", [str(self.binaries.containerd), f"--config={config}", "--log-level=info"])
        self._wait("containerd", lambda: self._ctr("version", check=False).returncode == 0)

    @property
    def base_spec_path(self) -> Path:
        """The OCI spec containers of the `nvidia` runtime handler start from."""
        return self.workdir / "containerd" / "nvidia-base-spec.json"

    def _write_nvidia_base_spec(self) -> None:
        from kgwe.localcluster import nvidiastack

        default = self._ctr("oci", "spec", timeout=30).stdout
        try:
            spec = json.loads(default)
        except ValueError:
            raise ControlPlaneError(f"`ctr oci spec` printed no OCI spec: {default[:200]!r}") from None
        self.base_spec_path.write_text(json.dumps(nvidiastack.runtime_base_spec(spec), indent=1))

    def _ctr(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binaries.ctr), f"--address={self.containerd_address}", "--namespace=k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise ControlPlaneError(f"ctr {' '.join(args[:3])} failed: {proc.stderr.strip()[-1000:]}")
        return proc

    def image_references(self) -> set[str]:
        """Named images (not the digests containerd's CRI also lists)."""
        return {
            r for r in self._ctr("images", "list", "--quiet").stdout.split() if not r.startswith("sha256:")
        }

    def import_image(self, archive: Path, reference: str | None = None) -> str:
        """Import an OCI archive into containerd's k8s.io namespace under the reference it names (checked:
        nothing on this node may pull); returns the reference."""
        reference = reference or archive_reference(archive)
        if not archive.is_file():
            raise ControlPlaneError(f"image archive {archive} does not exist")
        if reference is None:
            raise ControlPlaneError(
                f"{archive} names no image reference (index.json annotation io.containerd.image.name or "
                "org.opencontainers.image.ref.name): cannot tell pods what to run it as"
            )
        self._ctr("images", "import", "--local", str(archive))
        if reference not in self.image_references():
            raise ControlPlaneError(f"importing {archive} did not give image {reference}")
        self.imported[reference] = str(archive)
        return reference

    def tag_image(self, source: str, target: str) -> None:
        """Give an imported image a second reference (e.g. the one a chart uses by default)."""
        if target not in self.image_references():
            self._ctr("images", "tag", source, target)

    # ---- kubelet --------------------------------------------------------------------------------
    def _identity(self, name: str, user: str, group: str | None) -> Path:
        """A client certificate for `user` and a kubeconfig using it; returns the kubeconfig path."""
        assert self.cp.pki is not None
        pki = self.workdir / "pki"
        cert, key = pki / f"{name}.crt", pki / f"{name}.key"
        issue(self.cp.pki, cert, key, user, group)
        path = self.workdir / f"{name}.kubeconfig"
        server = f"https://{self.cp.node_ip}:{self.cp.apiserver_port}"
        path.write_text(yaml.safe_dump(kubeconfig_document(server, self.cp.pki.ca_cert, cert, key, user)))
        return path

    def kubelet_config(self) -> dict[str, Any]:
        assert self.cp.pki is not None
        endpoint = f"unix://{self.containerd_address}"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            **cgroups.kubelet_settings(f"/{CGROUP_ROOT}"),
            "address": self.cp.node_ip,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.kubelet_healthz_port,
            "tlsCertFile": str(self.workdir / "pki" / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(self.workdir / "pki" / "kubelet-serving.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cp.pki.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": endpoint,
            "imageServiceEndpoint": endpoint,
            "clusterDNS": [CLUSTER_DNS_IP],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": "/etc/resolv.conf",
            "podLogsDir": str(self.workdir / "pod-logs"),
            "oomScoreAdj": 0,  # raising its own priority needs CAP_SYS_RESOURCE where it is missing
            "makeIPTablesUtilChains": False,
            "failSwapOn": False,
            # Imported images cannot be pulled again: never collect them, evict only when nearly full.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "featureGates": dict(self.cp.feature_gates),
        }

    def _start_kubelet(self) -> None:
        assert self.cp.pki is not None
        self.kubelet_port, self.kubelet_healthz_port = free_port(), free_port()
        pki = self.workdir / "pki"
        issue(
            self.cp.pki,
            pki / "kubelet-serving.crt",
            pki / "kubelet-serving.key",
            f"system:node:{self.name}",
            "system:nodes",
            server=True,
            dns_names=[self.name],
            ips=[self.cp.node_ip],
        )
        kubeconfig = self._identity("kubelet", f"system:node:{self.name}", "system:nodes")
        config = self.workdir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self.kubelet_config(), sort_keys=False))
        self.kubelet_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "kubelet",
            [
                str(self.binaries.kubernetes.path("kubelet")),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.kubelet_dir}",
                f"--cert-dir={pki}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.cp.node_ip}",
                "--v=1",
            ],
        )
        self._wait("kubelet", lambda: self._http_ok(f"http://127.0.0.1:{self.kubelet_healthz_port}/healthz"))
        remaining = max(5.0, self.start_timeout_seconds)
        try:
            wait_nodes_ready(self.cp.api_client(), [self.name], timeout_seconds=remaining)
        except Exception as exc:
            raise ControlPlaneError(
                f"node {self.name} not Ready: {exc}; kubelet log:\n{tail(self.log_paths()['kubelet'], 15)}"
            ) from None

    # ---- kube-proxy -----------------------------------------------------------------------------
    def kube_proxy_config(self, kubeconfig: Path) -> dict[str, Any]:
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "nftables",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.name,
            "clusterCIDR": CLUSTER_CIDR,
            "healthzBindAddress": f"127.0.0.1:{self.kube_proxy_healthz_port}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            # leave the host's conntrack table sizes and timeouts as they are
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }

    def _start_kube_proxy(self) -> None:
        self.kube_proxy_healthz_port = free_port()
        kubeconfig = self._identity("kube-proxy", "system:kube-proxy", None)
        config = self.workdir / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump(self.kube_proxy_config(kubeconfig), sort_keys=False))
        self._spawn(
            "kube-proxy", [str(self.binaries.kubernetes.path("kube-proxy")), f"--config={config}", "--v=1"]
        )
        self._wait(
            "kube-proxy", lambda: self._http_ok(f"http://127.0.0.1:{self.kube_proxy_healthz_port}/healthz")
        )

    # ---- helpers --------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        env = {**os.environ, "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"}  # nft, ip, iptables
        self._procs[name] = spawn(argv, self.cp.logs_dir / f"{name}.log", self.workdir, env)

    @staticmethod
    def _http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def _wait(self, name: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.start_timeout_seconds
        proc = self._procs[name]
        log = self.cp.logs_dir / f"{name}.log"
        while not ready():
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with code {proc.returncode} while starting; log {log}:\n{tail(log, 15)}"
                )
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name} not ready after {self.start_timeout_seconds:.0f}s; log {log}:\n{tail(log, 15)}"
                )
            time.sleep(0.1)
