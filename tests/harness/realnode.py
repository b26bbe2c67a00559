"""For tests on the real node: a small image to run in pods, and what the host looks like (to prove that a
stopped node left nothing behind).

The image is Debian's static busybox (`make host-packages` installs busybox-static) written as
an OCI archive by kgwe.localcluster.ociimage: sh, nslookup, wget, httpd, id and friends as symlinks,
non-root by default.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kgwe.localcluster import cgroups, hoststate
from kgwe.localcluster.controlplane import cache_base
from kgwe.localcluster.ociimage import ImageFile, ImageSpec, write_oci_archive
from kgwe.localcluster.realnode import BRIDGE, CGROUP_ROOT

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "cat", "echo", "id", "ls", "sleep", "touch", "nslookup", "wget", "httpd", "hostname")


@dataclass(frozen=True)
class PodImage:
    archive: Path
    reference: str


def busybox_image() -> PodImage:
    """The busybox test image (built once per busybox version into the cache)."""
    if not BUSYBOX.is_file():
        raise RuntimeError(
            f"the real-node tests need {BUSYBOX} (Debian's busybox-static): run `make host-packages`"
        )
    banner = subprocess.run([str(BUSYBOX)], capture_output=True, text=True, check=False).stdout
    match = re.search(r"BusyBox v(\d+\.\d+\.\d+)", banner)
    if match is None:
        raise RuntimeError(f"{BUSYBOX} does not say its version")
    reference = f"kgwe.local/busybox:{match.group(1)}"
    archive = cache_base() / "test-images" / f"busybox-{match.group(1)}-{BUSYBOX.stat().st_size}.oci.tar"
    if not archive.is_file():
        spec = ImageSpec(
            reference,
            [ImageFile("/bin/busybox", BUSYBOX)],
            ["/bin/sh"],
            env=("PATH=/bin",),
            symlinks={f"/bin/{a}": "busybox" for a in APPLETS},
        )
        write_oci_archive(spec, archive)
    return PodImage(archive, reference)


# Kernel settings compared before and after a node: every file of these /proc/sys directories (not only
# the ones the node's code knows it changes), minus counters and per-boot values that move by themselves.
SYSCTL_DIRS = ("net/ipv4", "net/ipv4/conf/all", "net/ipv4/conf/default", "net/ipv6/conf/all", "vm", "kernel")
_VOLATILE = re.compile(
    r"(random/|ns_last_pid|pty/nr|inotify|tainted|sched_domain|perf_event|drop_caches|"
    r"stat_refresh|compact_memory|nr_pdflush|hung_task|io_uring|^kernel/keys/|^vm/stat|"
    r"neigh|route/flush|tcp_fastopen_key|printk_ratelimit|osrelease|hostname|domainname|"
    r"version|fs/|unprivileged_bpf|bootloader|cad_pid|real-root-dev|sched_rt|numa_balancing|"
    r"nr_hugepages|panic_print)"
)


def sysctls() -> dict[str, str]:
    base = Path("/proc/sys")
    values = {}
    for directory in SYSCTL_DIRS:
        for path in (base / directory).iterdir():
            key = str(path.relative_to(base))
            if not path.is_file() or _VOLATILE.search(key):
                continue
            try:
                values[key] = path.read_text().strip()
            except OSError:
                continue
    # the keys hoststate restores, wherever they are
    for key in hoststate.SYSCTLS:
        value = hoststate.read_sysctl(key)
        if value is not None:
            values[key] = value
    return values


def node_processes() -> list[str]:
    """Processes of a real node, by program name (whoever started them)."""
    names = ("containerd", "containerd-shim-runc-v2", "kubelet", "kube-proxy", "coredns", "pause", "busybox")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(entry / "exe")
        except OSError:
            continue
        if Path(exe.removesuffix(" (deleted)")).name in names:
            found.append(f"{entry.name} {exe}")
    return found


def host_state(directories: tuple[Path, ...] = ()) -> dict[str, object]:
    """What a node may leave behind: processes, mounts (under `directories` and the fixed paths), network
    devices, the nftables ruleset, the fixed paths' entries, kernel settings, the node's cgroups."""
    nft = subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True, check=False)
    links = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True)
    fixed = {str(p): sorted(os.listdir(p)) if p.is_dir() else p.exists() for p in hoststate.FIXED_PATHS}
    return {
        "processes": node_processes(),
        "mounts": [str(m) for m in hoststate.mounts_under([*directories, *hoststate.FIXED_PATHS])],
        "links": sorted(link["ifname"] for link in json.loads(links.stdout)),
        "nftables": nft.stdout,
        "fixed paths": fixed,
        "sysctls": sysctls(),
        "cgroups": cgroups.leftovers(CGROUP_ROOT),
        "bridge": hoststate.link_exists(BRIDGE),
    }


def differences(before: dict[str, object], after: dict[str, object]) -> dict[str, tuple[object, object]]:
    """The entries of two host_state() results that differ (sysctls key by key)."""
    diff: dict[str, tuple[object, object]] = {}
    for key in before:
        if key == "sysctls":
            b, a = before[key], after[key]
            assert isinstance(b, dict) and isinstance(a, dict)
            for name in sorted(set(b) | set(a)):
                if b.get(name) != a.get(name):
                    diff[f"sysctl {name}"] = (b.get(name), a.get(name))
        elif before[key] != after[key]:
            diff[key] = (before[key], after[key])
    return diff
