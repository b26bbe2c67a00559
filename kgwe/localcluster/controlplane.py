"""A real, local Kubernetes control plane: etcd + kube-apiserver + kube-controller-manager + kube-scheduler
+ kwok.

Tests and `kgwe demo` talk to genuine Kubernetes components (built from Go modules by
hack/cluster-bins.sh), not mocks: schema validation, server-side apply, RBAC, the real scheduler and the
real controllers (Deployments, DaemonSets, Jobs, garbage collection, namespace deletion, node lifecycle,
ServiceAccounts, quota status) all behave as in production. Nodes and their kubelets are simulated by kwok;
with `real_node` one real node joins as well (containerd, kubelet, kube-proxy, CNI bridge; see realnode.py,
which builds on this module) with CoreDNS on it, and the apiserver serves on the host's address so its pods
reach it.

Every process runs in its own process group and is stopped on `stop()`, at interpreter exit, on SIGTERM /
SIGHUP, and (via PR_SET_PDEATHSIG) if this process is killed outright. Component logs live in the work dir;
`keep_logs()` preserves them when a test fails.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import yaml
from kubernetes import client

from kgwe.errors import KgweError
from kgwe.localcluster.pki import ADMIN_GROUP, PkiFiles, issue, write_pki
from kgwe.localcluster.privatefiles import UnsafePath, copy_files, make_temporary_directory
from kgwe.resources import hack_dir

BUILD_SCRIPT = hack_dir() / "cluster-bins.sh"
WRAPPER_GO_MOD = hack_dir() / "k8s" / "go.mod"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
SCHEDULER_API_VERSION = "kubescheduler.config.k8s.io/v1"
# API group versions a feature gate needs the apiserver to serve (off by default while in beta).
FEATURE_GATE_APIS: Mapping[str, tuple[str, ...]] = {"GenericWorkload": ("scheduling.k8s.io/v1beta1",)}
KWOK_STAGES = Path(__file__).resolve().parent / "kwok-stages.yaml"  # what a kubelet would do, as kwok Stages
# The cluster's Service network: the `kubernetes` Service takes its first address, the DNS add-on a fixed one.
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
CLUSTER_DNS_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"


class ControlPlaneError(KgweError):
    """The local control plane could not be built, started or reached."""


# --------------------------------------------------------------------------------------------------
# binaries


@dataclass(frozen=True)
class Binaries:
    """Where the component binaries are, and which Kubernetes release they are."""

    directory: Path
    kubernetes_version: str
    manifest: Mapping[str, str]

    def path(self, component: str) -> Path:
        return self.directory / component


def pinned_kubernetes_version() -> str:
    """The k8s.io/kubernetes version pinned by the wrapper module (the cache key)."""
    try:
        text = WRAPPER_GO_MOD.read_text()
    except OSError as exc:
        raise ControlPlaneError(f"cannot read {WRAPPER_GO_MOD}: {exc.strerror}") from exc
    match = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)", text, re.MULTILINE)
    if not match:
        raise ControlPlaneError(f"{WRAPPER_GO_MOD} does not pin k8s.io/kubernetes")
    return match.group(1)


def cache_base() -> Path:
    """Same rule as hack/cluster-bins.sh: $KGWE_CACHE_DIR, else $XDG_CACHE_HOME/kgwe, else ~/.cache/kgwe."""
    if os.environ.get("KGWE_CACHE_DIR"):
        return Path(os.environ["KGWE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kgwe"


def _read_manifest(directory: Path) -> dict[str, str] | None:
    manifest = directory / "MANIFEST"
    if not manifest.is_file() or not all(os.access(directory / c, os.X_OK) for c in COMPONENTS):
        return None
    pairs = (line.split("=", 1) for line in manifest.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs}


def find_binaries(build: bool = True) -> Binaries:
    """Locate the control-plane binaries, building them with hack/cluster-bins.sh when needed.

    With Go on PATH the build script decides (it reuses the cache unless the wrapper module changed; that
    check takes well under a second). Without Go a complete cache for the pinned version is used as is.
    $KGWE_K8S_BIN_DIR points at a directory with the component binaries (and MANIFEST) to use instead.
    Never returns without binaries: a missing Go toolchain is an error saying what to install.
    """
    override = os.environ.get("KGWE_K8S_BIN_DIR")
    if override:
        directory = Path(override)
        manifest = _read_manifest(directory)
        if manifest is None:
            raise ControlPlaneError(
                f"KGWE_K8S_BIN_DIR={override} must hold MANIFEST and executables {', '.join(COMPONENTS)}"
            )
        return Binaries(directory, manifest.get("kubernetes", "unknown"), manifest)

    version = pinned_kubernetes_version()
    directory = cache_base() / f"k8s-{version}"
    can_build = build and BUILD_SCRIPT.is_file() and shutil.which("go") is not None
    if can_build:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            raise ControlPlaneError(
                f"hack/cluster-bins.sh failed (exit {proc.returncode}); its message is above. "
                "The cluster tests build etcd, kube-apiserver, kube-controller-manager, kube-scheduler "
                "and kwok with Go >= 1.26."
            )
        directory = Path(proc.stdout.strip().splitlines()[-1])
    manifest = _read_manifest(directory)
    if manifest is None or manifest.get("kubernetes") != version:
        raise ControlPlaneError(
            f"control-plane binaries for Kubernetes {version} are missing in {directory}. "
            f"Install Go >= 1.26 (https://go.dev/dl/) and run `bash {BUILD_SCRIPT}` (`make cluster-bins`) "
            "(it builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok "
            "from Go modules, once)."
        )
    return Binaries(directory, version, manifest)


# --------------------------------------------------------------------------------------------------
# process handling


PORT_ATTEMPTS = 3  # starts of a component whose picked port another process took meanwhile


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PICKED_PORT = 10000


def free_port() -> int:
    """A currently free loopback port for a server about to start (a race with other processes is handled
    by retrying start). Picked at random below the kernel's ephemeral range where there is room: a port in
    that range can be handed to any socket bound to port 0 (a test's or a library's server, say) between
    this check and the server's own bind."""
    try:
        ephemeral_low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 0
    if ephemeral_low - _LOWEST_PICKED_PORT >= 1000:
        for _ in range(50):
            port = random.randrange(_LOWEST_PICKED_PORT, ephemeral_low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path


def spawn(
    argv: list[str], log_path: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a component in its own process group (Ctrl-C reaches us, we stop them in order), its output
    appended to `log_path`; it gets SIGTERM if this process dies (when started from the main thread: the
    signal follows the thread that forked it)."""
    main = threading.current_thread() is threading.main_thread()
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=True,
            preexec_fn=_die_with_parent if main else None,
        )


def kubeconfig_document(server: str, ca_cert: Path, cert: Path, key: Path, user: str) -> dict[str, Any]:
    """A kubeconfig for one client certificate identity against the local cluster."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "kgwe-local", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}
        ],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "kgwe-local", "context": {"cluster": "kgwe-local", "user": user}}],
        "current-context": "kgwe-local",
    }


def host_ip() -> str:
    """The host's address on its default route: where pods on the real node reach the apiserver and
    where the apiserver reaches the kubelet. A UDP connect sends nothing; it only asks the routing table."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # TEST-NET-3: an address only the default route covers
            return str(s.getsockname()[0])
        except OSError as exc:
            raise ControlPlaneError(
                f"this host has no IPv4 default route ({exc.strerror}): the real node needs an address "
                "other than loopback that pods can reach the apiserver on"
            ) from None


def stop_process_group(popen: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group started with start_new_session, SIGKILL it if it lingers."""
    if popen.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, sig)
        try:
            popen.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(path: Path, lines: int = 20) -> str:
    """Last `lines` lines of a log file (for failure reports)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


_LIVE: weakref.WeakSet[ControlPlane] = weakref.WeakSet()
_HANDLERS_INSTALLED = False
# what signal.getsignal returns: a handler function, SIG_DFL/SIG_IGN, or None (not installed from Python)
_SignalHandler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


def _stop_all_live() -> None:
    for cp in list(_LIVE):
        with contextlib.suppress(Exception):
            cp.stop()


def _install_exit_handlers() -> None:
    """atexit + SIGTERM/SIGHUP: stop every live control plane, then behave as before."""
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(_stop_all_live)
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(signum)

        def handler(sig: int, frame: FrameType | None, previous: _SignalHandler = previous) -> None:
            _stop_all_live()
            if callable(previous):
                previous(sig, frame)
            elif previous != signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)

        signal.signal(signum, handler)


def default_scheduler_config(qps: int = 50, burst: int = 100, **extra: object) -> dict[str, Any]:
    """A KubeSchedulerConfiguration for tests; `extra` keys (e.g. `extenders`, `profiles`) are merged in.

    qps/burst are kube-scheduler's own defaults; the baseline benchmark raises them so the client rate
    limiter does not hide the scheduler's real throughput.
    """
    config: dict[str, Any] = {
        "apiVersion": SCHEDULER_API_VERSION,
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"qps": qps, "burst": burst},
    }
    config.update(extra)
    return config


def baseline_scheduler_config(**extra: object) -> dict[str, Any]:
    """The configuration bench/control_plane.py measures the bare scheduler with.

    Client rate limits are raised so the scheduler's own work, not its API client throttle, is measured.
    Pass `extenders=[...]` to compare an extender against the same baseline.
    """
    return default_scheduler_config(qps=1000, burst=2000, **extra)


# --------------------------------------------------------------------------------------------------
# the control plane


class JoinedNode(Protocol):
    """What the control plane does with the real node it starts (kgwe.localcluster.realnode.RealNode, which
    imports this module)."""

    def start(self) -> object: ...

    def stop(self) -> object: ...

    def log_paths(self) -> dict[str, Path]: ...


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on loopback.

    Use as a context manager or call start()/stop(). `scheduler_config` is a KubeSchedulerConfiguration
    mapping (e.g. from `default_scheduler_config(extenders=[...])`); the kubeconfig and
    `leaderElect: false` are filled in. `feature_gates` go to every component (e.g. {"GenericWorkload":
    True} serves native PodGroups: the apiserver then also serves their API group, see
    `FEATURE_GATE_APIS`).

    `real_node` (e.g. `functools.partial(RealNode, images=[...])`, called with this control plane and the
    node's work dir) also starts the host's one real node with the cluster DNS add-on (`self.node`; needs
    root): the apiserver then listens on every address, advertises the host's, authorizes kubelets with the
    Node authorizer and NodeRestriction, and reaches kubelets with a client certificate.
    """

    def __init__(
        self,
        binaries: Binaries | None = None,
        *,
        scheduler_config: Mapping[str, Any] | None = None,
        start_scheduler: bool = True,
        start_controller_manager: bool = True,
        feature_gates: Mapping[str, bool] | None = None,
        workdir: Path | None = None,
        start_timeout_seconds: float = 90.0,
        node_lease_seconds: int = 40,
        real_node: Callable[[ControlPlane, Path], JoinedNode] | None = None,
        apiserver_args: Sequence[str] = (),
    ) -> None:
        """`node_lease_seconds`: the simulated kubelets' Lease duration; each renews at a quarter of it, as
        kubelet does (40 s, kubelet's default: 1,000 nodes write 100 Leases/s, about a quarter of this
        2-core machine with apiserver and etcd). Benchmarks may lengthen it to give the control plane room.
        `apiserver_args`: more kube-apiserver flags (e.g. --enable-aggregator-routing=true, so a webhook
        Service reaches a process on this host through its EndpointSlice)."""
        self.apiserver_args = list(apiserver_args)
        self.binaries = binaries or find_binaries()
        self.node_lease_seconds = node_lease_seconds
        self.scheduler_config = dict(scheduler_config or default_scheduler_config())
        self._want_scheduler = start_scheduler
        self._want_kcm = start_controller_manager
        self.feature_gates = dict(feature_gates or {})
        self._given_workdir = workdir
        self.start_timeout_seconds = start_timeout_seconds
        self.workdir: Path | None = None
        self.pki: PkiFiles | None = None
        self.apiserver_port = 0
        self.etcd_port = 0
        self.scheduler_port = 0
        self.kwok_port = 0
        self._procs: dict[str, _Process] = {}
        self.controller_manager_port = 0
        self._api_client: client.ApiClient | None = None
        self._keep_logs_to: Path | None = None
        self._lock = threading.RLock()
        self.started_seconds: float | None = None
        self._make_node = real_node
        self.real_node = real_node is not None
        self.node: JoinedNode | None = None  # the RealNode, while started
        self.node_ip = "127.0.0.1"

    # ---- public surface -------------------------------------------------------------------------
    @property
    def server_url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig_path(self) -> Path:
        assert self.workdir is not None, "control plane not started"
        return self.workdir / "kubeconfig"

    @property
    def logs_dir(self) -> Path:
        assert self.workdir is not None, "control plane not started"
        return self.workdir / "logs"

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.popen.pid for name, p in self._procs.items()}

    def log_paths(self) -> dict[str, Path]:
        paths = {name: p.log_path for name, p in self._procs.items()}
        if self.node is not None:
            paths.update(self.node.log_paths())
        return paths

    def log_tails(self, lines: int = 20) -> str:
        """Human-readable tail of every component log, for test failure reports."""
        parts = []
        for name, path in sorted(self.log_paths().items()):
            parts.append(f"----- {name}: {path} (last {lines} lines) -----\n{tail(path, lines)}")
        return "\n".join(parts)

    def keep_logs(self) -> Path:
        """Preserve component logs past stop(); returns where they will be (kept for failed tests): a new
        directory of this user's alone (mode 0700, an unguessable name) in $KGWE_LOG_DIR or the temporary
        directory, never a fixed name others could make first (kgwe.localcluster.privatefiles)."""
        if self._keep_logs_to is None:
            base = os.environ.get("KGWE_LOG_DIR")
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            self._keep_logs_to = make_temporary_directory(
                f"kgwe-control-plane-logs-{stamp}-", Path(base) if base else None
            )
        return self._keep_logs_to

    def api_client(self) -> client.ApiClient:
        """A shared kubernetes ApiClient authenticated as the admin client certificate."""
        if self._api_client is None:
            self._api_client = self.new_api_client()
        return self._api_client

    def new_api_client(self, pool_size: int = 32) -> client.ApiClient:
        assert self.pki is not None, "control plane not started"
        cfg = client.Configuration()
        cfg.host = self.server_url
        cfg.ssl_ca_cert = str(self.pki.ca_cert)
        cfg.cert_file = str(self.pki.admin_cert)
        cfg.key_file = str(self.pki.admin_key)
        cfg.connection_pool_maxsize = pool_size
        return client.ApiClient(cfg)

    def version(self) -> dict[str, Any]:
        """GET /version from the apiserver."""
        version: dict[str, Any] = json.loads(self._get(f"{self.server_url}/version"))
        return version

    # ---- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, attempts: int = PORT_ATTEMPTS) -> ControlPlane:
        """Start everything and wait until ready; retries when a picked port was taken meanwhile."""
        _install_exit_handlers()
        t0 = time.monotonic()
        for attempt in range(1, attempts + 1):
            try:
                self._start_once()
                break
            except ControlPlaneError as exc:
                port_clash = "address already in use" in str(exc).lower()
                if port_clash and attempt < attempts:
                    self.stop()  # another process took a port we picked: try again with new ones
                    continue
                try:
                    kept = f"full component logs kept in {self.keep_logs()}"
                except UnsafePath as unsafe:
                    kept = f"component logs not kept: {unsafe}"
                self.stop()
                raise ControlPlaneError(f"{exc}\n({kept})") from None
            except BaseException:  # Ctrl-C or a bug while starting: leave no process behind
                self.stop()
                raise
        self.started_seconds = time.monotonic() - t0
        return self

    def _start_once(self) -> None:
        with self._lock:
            self.workdir = self._given_workdir or Path(tempfile.mkdtemp(prefix="kgwe-cp-"))
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.logs_dir.mkdir(exist_ok=True)
            _LIVE.add(self)
            if self.real_node:
                self.node_ip = host_ip()
            serving_ips = [self.node_ip, KUBERNETES_SERVICE_IP] if self.real_node else []
            self.pki = write_pki(self.workdir / "pki", serving_ips=serving_ips)
            if self.real_node:
                issue(self.pki, *self.kubelet_client_files, "kube-apiserver-kubelet-client", ADMIN_GROUP)
            self.apiserver_port = free_port()
            self._write_kubeconfig()
            self._start_etcd()
            self._start_apiserver()
            if self._want_kcm:
                self._start_controller_manager()
            self._start_kwok()
            if self._want_scheduler:
                self.start_scheduler()
            if self.real_node:
                self._start_real_node()

    def _start_real_node(self) -> None:
        assert self.workdir is not None and self._make_node is not None
        self.node = self._make_node(self, self.workdir / "node")
        self.node.start()

    @property
    def kubelet_client_files(self) -> tuple[Path, Path]:
        """The apiserver's client certificate and key towards kubelets (`system:masters`)."""
        assert self.pki is not None, "control plane not started"
        return (
            self.pki.ca_cert.parent / "apiserver-kubelet-client.crt",
            self.pki.ca_cert.parent / "apiserver-kubelet-client.key",
        )

    def stop(self, remove_workdir: bool = True) -> None:
        """Stop the real node (if any) and every process (kwok, scheduler, controller manager, apiserver,
        etcd); remove the work dir."""
        with self._lock:
            if self.node is not None:
                self.node.stop()
                self.node = None
            for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
                self._stop_process(name)
            if self._api_client is not None:
                with contextlib.suppress(Exception):
                    self._api_client.close()
                self._api_client = None
            _LIVE.discard(self)
            if self.workdir is None:
                return
            if self._keep_logs_to is not None and self.logs_dir.is_dir():
                copy_files(self.logs_dir, self._keep_logs_to)
            if remove_workdir and self._given_workdir is None:
                shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None if remove_workdir else self.workdir

    def start_scheduler(self, config: Mapping[str, Any] | None = None) -> None:
        """(Re)start kube-scheduler, optionally with a new KubeSchedulerConfiguration (e.g. extenders)."""
        with self._lock:
            if config is not None:
                self.scheduler_config = dict(config)
            self._stop_process("kube-scheduler")
            assert self.workdir is not None, "control plane not started"
            cfg = dict(self.scheduler_config)
            cfg.setdefault("apiVersion", SCHEDULER_API_VERSION)
            cfg.setdefault("kind", "KubeSchedulerConfiguration")
            cfg["leaderElection"] = {**cfg.get("leaderElection", {}), "leaderElect": False}
            connection = {**cfg.get("clientConnection", {}), "kubeconfig": str(self.kubeconfig_path)}
            cfg["clientConnection"] = connection
            path = self.workdir / "kube-scheduler.yaml"
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            for attempt in range(1, PORT_ATTEMPTS + 1):  # a restart is not under start()'s retry
                try:
                    self._spawn_scheduler(path)
                    return
                except ControlPlaneError as exc:
                    if "address already in use" not in str(exc).lower() or attempt == PORT_ATTEMPTS:
                        raise
                    self._stop_process("kube-scheduler")  # another process took the port we picked

    def _spawn_scheduler(self, config_path: Path) -> None:
        self.scheduler_port = free_port()
        kubeconfig = str(self.kubeconfig_path)
        self._spawn(
            "kube-scheduler",
            [
                str(self.binaries.path("kube-scheduler")),
                f"--config={config_path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.scheduler_port}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                # no front-proxy (requestheader) CA is configured; without this the log fills with retries
                "--authentication-skip-lookup=true",
                *self._feature_gate_args(),
                "--v=2",
            ],
        )
        self._wait_http("kube-scheduler", f"https://127.0.0.1:{self.scheduler_port}/readyz", verify=False)

    @contextlib.contextmanager
    def using_scheduler_config(self, config: Mapping[str, Any]) -> Iterator[None]:
        """Run kube-scheduler with `config` (e.g. with `extenders:`) inside the block, then restore it."""
        previous = dict(self.scheduler_config)
        self.start_scheduler(config)
        try:
            yield
        finally:
            self.start_scheduler(previous)

    def stop_scheduler(self) -> None:
        with self._lock:
            self._stop_process("kube-scheduler")

    # ---- components -----------------------------------------------------------------------------
    def _start_etcd(self) -> None:
        assert self.workdir is not None
        self.etcd_port, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                str(self.binaries.path("etcd")),
                "--name=kgwe",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=kgwe={peer_url}",
                *self._etcd_no_fsync(),
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        self._wait_http("etcd", f"{client_url}/health", verify=False)

    def _etcd_no_fsync(self) -> list[str]:
        """`--unsafe-no-fsync` when this etcd has it (>= 3.5): throw-away data, fsync only slows tests."""
        shown = subprocess.run(
            [str(self.binaries.path("etcd")), "--help"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        return ["--unsafe-no-fsync=true"] if "--unsafe-no-fsync" in shown.stdout + shown.stderr else []

    def _start_apiserver(self) -> None:
        assert self.pki is not None and self.workdir is not None
        self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.path("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                *self._apiserver_node_args(),
                f"--secure-port={self.apiserver_port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={self.pki.serving_cert}",
                f"--tls-private-key-file={self.pki.serving_key}",
                f"--client-ca-file={self.pki.ca_cert}",
                f"--service-account-key-file={self.pki.sa_public_key}",
                f"--service-account-signing-key-file={self.pki.sa_private_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--profiling=false",
                *self._feature_gate_args(),
                *self._runtime_config_args(),
                *self.apiserver_args,
                "--v=1",
            ],
        )
        self._wait_http("kube-apiserver", f"{self.server_url}/readyz", verify=True)

    def _apiserver_node_args(self) -> list[str]:
        """Where the apiserver listens and how it treats nodes: loopback only with kwok nodes; with the
        real node, every address (its pods reach it through the `kubernetes` Service at the host's address),
        kubelets authorized as nodes, and a client certificate (and CA) for the kubelet's own API."""
        if not self.real_node:
            return [
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # The `kubernetes` Service endpoint reconciler refuses loopback addresses; nothing needs it.
                "--endpoint-reconciler-type=none",
                "--authorization-mode=RBAC",
            ]
        assert self.pki is not None
        cert, key = self.kubelet_client_files
        return [
            "--bind-address=0.0.0.0",
            f"--advertise-address={self.node_ip}",
            "--authorization-mode=Node,RBAC",
            # NodeRestriction: a kubelet changes only its own Node and its pods. ExtendedResourceToleration:
            # a pod asking for nvidia.com/gpu tolerates the GPU nodes' nvidia.com/gpu taint, as on GKE.
            "--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration",
            f"--kubelet-client-certificate={cert}",
            f"--kubelet-client-key={key}",
            f"--kubelet-certificate-authority={self.pki.ca_cert}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
        ]

    def _start_controller_manager(self) -> None:
        """The real kube-controller-manager with its default controllers, authenticated as the admin.

        The node lifecycle controller's grace period follows the simulated kubelets' Lease duration, so
        lengthened leases (a benchmark's `node_lease_seconds`) do not make idle nodes look unreachable.
        """
        assert self.pki is not None and self.workdir is not None
        self.controller_manager_port = free_port()
        kubeconfig = str(self.kubeconfig_path)
        self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.path("kube-controller-manager")),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--authentication-skip-lookup=true",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.controller_manager_port}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                "--leader-elect=false",
                f"--service-account-private-key-file={self.pki.sa_private_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                f"--node-monitor-grace-period={max(50, self.node_lease_seconds + 10)}s",
                # client rate limits well above the defaults (20/30): a test creates hundreds of objects
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                *self._feature_gate_args(),
                "--v=1",
            ],
        )
        self._wait_http(
            "kube-controller-manager",
            f"https://127.0.0.1:{self.controller_manager_port}/healthz",
            verify=False,
        )

    def _feature_gate_args(self) -> list[str]:
        if not self.feature_gates:
            return []
        gates = ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(self.feature_gates.items()))
        return [f"--feature-gates={gates}"]

    def _runtime_config_args(self) -> list[str]:
        """API groups a gate needs served (kube-scheduler never gets ready when a gate's API is missing)."""
        apis = sorted(
            {api for gate, on in self.feature_gates.items() if on for api in FEATURE_GATE_APIS.get(gate, ())}
        )
        return [f"--runtime-config={','.join(f'{api}=true' for api in apis)}"] if apis else []

    def _start_kwok(self) -> None:
        self.kwok_port = free_port()
        self._spawn(
            "kwok",
            [
                str(self.binaries.path("kwok")),
                f"--kubeconfig={self.kubeconfig_path}",
                f"--config={KWOK_STAGES}",
                # Only nodes created as simulated (gpunodes.py sets this annotation) are driven by kwok.
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address=127.0.0.1:{self.kwok_port}",
                f"--node-lease-duration-seconds={self.node_lease_seconds}",
                "--cidr=10.0.0.1/16",
            ],
        )
        self._wait_http("kwok", f"http://127.0.0.1:{self.kwok_port}/healthz", verify=False)

    def _write_kubeconfig(self) -> None:
        assert self.pki is not None and self.workdir is not None
        config = kubeconfig_document(
            self.server_url, self.pki.ca_cert, self.pki.admin_cert, self.pki.admin_key, "kgwe-admin"
        )
        self.kubeconfig_path.write_text(yaml.safe_dump(config, sort_keys=False))

    # ---- helpers --------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self.workdir is not None
        log_path = self.logs_dir / f"{name}.log"
        self._procs[name] = _Process(name, spawn(argv, log_path, self.workdir), log_path)

    def _stop_process(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is not None:
            stop_process_group(proc.popen)

    def _ssl_context(self, verify: bool) -> ssl.SSLContext:
        assert self.pki is not None
        if verify:
            ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        else:
            ctx = ssl._create_unverified_context()  # scheduler serves a self-signed cert on loopback
        ctx.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return ctx

    def _get(self, url: str, verify: bool = True, timeout: float = 5.0) -> str:
        ctx = self._ssl_context(verify) if url.startswith("https") else None
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as resp:
            body: bytes = resp.read()
        return body.decode()

    def _wait_http(self, name: str, url: str, verify: bool) -> None:
        deadline = time.monotonic() + self.start_timeout_seconds
        last_error = ""
        proc = self._procs[name]
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with code {proc.popen.returncode} while starting; log {proc.log_path}:\n"
                    f"{tail(proc.log_path, 15)}"
                )
            try:
                self._get(url, verify=verify, timeout=2.0)
                return
            except (urllib.error.URLError, OSError, ssl.SSLError) as exc:
                last_error = str(getattr(exc, "reason", exc))
            time.sleep(0.1)
        raise ControlPlaneError(
            f"{name} not ready after {self.start_timeout_seconds:.0f}s ({url}: {last_error}); "
            f"log {proc.log_path}:\n{tail(proc.log_path, 15)}"
        )
