"""Machine-wide state a real node changes, recorded before it starts and swept after it stops.

Whatever `--root-dir` and containerd's `root`/`state` say, some paths are fixed: the kubelet's
device-plugin socket (/var/lib/kubelet/device-plugins), log symlinks (/var/log/containers), shim sockets
(/run/containerd/s), CNI results (/var/lib/cni). The CNI bridge plugin turns on IP forwarding, the kubelet
sets kernel tunables (panic, overcommit), kube-proxy and the CNI plugins own nftables tables. A teardown
must put all of it back, also after a crash: the snapshot is saved as JSON beside the node's lock, and the
next start (or `kgwe cluster down`) sweeps from it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Paths the node's programs create whatever they are told; removed (or emptied of what was not there
# before) at teardown.
FIXED_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/run/containerd"),
    Path("/var/lib/cni"),
    Path("/var/log/containers"),
    Path("/var/log/pods"),
    Path("/run/netns"),
    Path("/run/xtables.lock"),
    Path("/run/nvidia"),  # a GPU node's driver root (mocknvml.DRIVER_ROOT), where the GPU Operator keeps it
)
# Kernel settings the node's programs change: the bridge plugin (forwarding), the kubelet
# (setupKernelTunables), kube-proxy (route_localnet, conntrack limits, should its config ask).
SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding",
    "net/ipv4/conf/all/route_localnet",
    "net/ipv4/conf/default/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
# nftables tables of kube-proxy (nftables mode) and of the CNI plugins' nftables backends.
NFT_TABLES = (
    ("ip", "kube-proxy"),
    ("ip6", "kube-proxy"),
    ("ip", "cni_hostport"),
    ("ip6", "cni_hostport"),
    ("inet", "cni_plugins_masquerade"),
)
_PROC_SYS = Path("/proc/sys")
_MNT_DETACH = 2


@dataclass
class HostSnapshot:
    """What the host looked like before the node started."""

    sysctls: dict[str, str] = field(default_factory=dict)
    # fixed path -> its entries then (None: the path did not exist)
    fixed: dict[str, list[str] | None] = field(default_factory=dict)
    nft_tables: list[str] = field(default_factory=list)  # "family name"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> HostSnapshot:
        data = json.loads(text)
        return cls(
            sysctls=dict(data.get("sysctls") or {}),
            fixed=dict(data.get("fixed") or {}),
            nft_tables=list(data.get("nft_tables") or []),
        )


def read_sysctl(key: str) -> str | None:
    try:
        return (_PROC_SYS / key).read_text().strip()
    except OSError:
        return None


def take_snapshot() -> HostSnapshot:
    snap = HostSnapshot()
    for key in SYSCTLS:
        value = read_sysctl(key)
        if value is not None:
            snap.sysctls[key] = value
    for path in FIXED_PATHS:
        if path.is_dir():
            snap.fixed[str(path)] = sorted(os.listdir(path))
        else:
            snap.fixed[str(path)] = [] if path.exists() else None
    snap.nft_tables = [f"{family} {name}" for family, name in nft_tables()]
    return snap


def restore_sysctls(snap: HostSnapshot) -> list[str]:
    """Write back every recorded value that changed; returns the ones that could not be restored."""
    failed = []
    for key, value in snap.sysctls.items():
        if read_sysctl(key) in (None, value):
            continue
        try:
            (_PROC_SYS / key).write_text(value)
        except OSError as exc:
            failed.append(f"{key.replace('/', '.')}={value}: {exc.strerror}")
    return failed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def sweep_fixed_paths(snap: HostSnapshot) -> None:
    """Remove fixed paths that did not exist before, and what appeared inside those that did."""
    for name, before in snap.fixed.items():
        path = Path(name)
        if before is None:
            _remove(path)
        elif path.is_dir():
            for entry in set(os.listdir(path)) - set(before):
                _remove(path / entry)


def mount_points() -> list[Path]:
    """Every mount point, in /proc/self/mountinfo order (parents before children)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.append(Path(fields[4].replace("\\040", " ")))
    return points


def mounts_under(roots: Iterable[Path]) -> list[Path]:
    """Mount points at or below any of `roots`, deepest (latest) first."""
    resolved = [Path(os.path.realpath(r)) for r in roots]
    found = [p for p in mount_points() if any(p == r or r in p.parents for r in resolved)]
    return list(reversed(found))


def unmount_under(roots: Iterable[Path]) -> list[str]:
    """Detach every mount at or below `roots` (overlay root filesystems, pod volumes, network namespace
    bind mounts, the kubelet's shared root); returns the ones still mounted afterwards."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    roots = list(roots)
    for _ in range(5):  # a mount may be stacked several times on one point
        points = mounts_under(roots)
        if not points:
            return []
        for point in points:
            libc.umount2(str(point).encode(), _MNT_DETACH)
    return [str(p) for p in mounts_under(roots)]


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def delete_link(name: str) -> None:
    if link_exists(name):
        subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)


def links_with_master(master: str) -> list[str]:
    """Interfaces enslaved to `master` (the host ends of pod veths on the bridge)."""
    base = Path("/sys/class/net")
    return [
        p.name for p in base.iterdir() if (p / "master").exists() and (p / "master").resolve().name == master
    ]


def nft_tables() -> list[tuple[str, str]]:
    """(family, name) of every nftables table on the host."""
    proc = subprocess.run(["nft", "-j", "list", "tables"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return []
    items = json.loads(proc.stdout or "{}").get("nftables", [])
    return [(t["table"]["family"], t["table"]["name"]) for t in items if "table" in t]


def _table_is_empty(family: str, name: str) -> bool:
    proc = subprocess.run(
        ["nft", "-j", "list", "table", family, name], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return False
    return not any(
        "table" not in item
        for item in json.loads(proc.stdout or "{}").get("nftables", [])
        if "metainfo" not in item
    )


def delete_nft_tables(snap: HostSnapshot | None) -> list[str]:
    """Delete the node's nftables tables, and empty tables that were not there before (iptables-nft makes
    an empty `ip nat` when the portmap plugin looks for old iptables chains); returns what is left that was
    not there before."""
    before = set(snap.nft_tables) if snap is not None else set()
    for family, name in nft_tables():
        if f"{family} {name}" in before:
            continue
        if (family, name) in NFT_TABLES or _table_is_empty(family, name):
            subprocess.run(["nft", "delete", "table", family, name], capture_output=True, check=False)
    return [
        f"{f} {n}"
        for f, n in nft_tables()
        if f"{f} {n}" not in before and (snap is not None or (f, n) in NFT_TABLES)
    ]
