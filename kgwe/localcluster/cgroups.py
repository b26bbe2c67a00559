"""The real node's cgroup tree, and every cgroups-v1 specific of the local cluster in one place.

The kubelet puts all pods under its `cgroupRoot` (here one directory per host, `/kgwe-node`), which must
exist before it starts. On cgroups v1 (and the v1 "hybrid" layout: v1 controllers on a tmpfs at
/sys/fs/cgroup, cgroup2 at /sys/fs/cgroup/unified) that means one directory per controller hierarchy, and a
new cpuset directory is unusable until it copies `cpuset.cpus` and `cpuset.mems` from its parent.
Kubernetes >= 1.35's kubelet also refuses v1 unless `failCgroupV1: false`. containerd announced the end of
v1 support; when it goes, this module is what changes.

Teardown kills whatever still runs in the tree (containers outlive a stopped kubelet) and removes the
directories, deepest first, in every hierarchy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CGROUP_FS = Path("/sys/fs/cgroup")
_CGROUP2_MAGIC_NAME = "cgroup2"


def _mounts() -> Iterator[tuple[str, Path, str]]:
    """(fstype, mount point, super options) of each mount, from /proc/self/mountinfo."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            yield tail[0], Path(fields[4].replace("\\040", " ")), tail[2]


def is_v1() -> bool:
    """True on cgroups v1 or hybrid (any v1 controller hierarchy mounted), False on a pure v2 host."""
    return any(fstype == "cgroup" for fstype, _, _ in _mounts())


def hierarchies() -> list[Path]:
    """Mount points of every cgroup hierarchy (v1 controllers, named v1 hierarchies, cgroup2)."""
    seen: list[Path] = []
    for fstype, point, _ in _mounts():
        if fstype in ("cgroup", _CGROUP2_MAGIC_NAME) and point not in seen:
            seen.append(point)
    return seen


def kubelet_settings(cgroup_root: str) -> dict[str, Any]:
    """KubeletConfiguration fields for this host's cgroups."""
    settings: dict[str, Any] = {"cgroupDriver": "cgroupfs", "cgroupRoot": cgroup_root}
    if is_v1():
        settings["failCgroupV1"] = False  # >= 1.35 refuses v1 otherwise (it warns instead)
    return settings


def create_root(name: str) -> None:
    """Make /<name> in every hierarchy the kubelet uses; on v1, cpuset's copies its parent's CPUs and
    memory nodes; on v2, the pods' controllers are delegated to it."""
    for hierarchy in hierarchies():
        directory = hierarchy / name.strip("/")
        directory.mkdir(exist_ok=True)
        if (hierarchy / "cpuset.cpus").is_file() and (directory / "cpuset.cpus").is_file():
            for key in ("cpuset.cpus", "cpuset.mems"):
                if not (directory / key).read_text().strip():
                    (directory / key).write_text((hierarchy / key).read_text())
        if hierarchy == CGROUP_FS and (hierarchy / "cgroup.subtree_control").is_file():  # pure v2 host
            wanted = (hierarchy / "cgroup.controllers").read_text().split()
            with contextlib.suppress(OSError):
                (directory / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))


def _tree(hierarchy: Path, name: str) -> list[Path]:
    """The directories of /<name> in `hierarchy`, deepest first."""
    top = hierarchy / name.strip("/")
    if not top.is_dir():
        return []
    found = [Path(d) for d, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def pids(name: str) -> set[int]:
    """Every process in /<name> (any hierarchy, any depth)."""
    found: set[int] = set()
    for hierarchy in hierarchies():
        for directory in _tree(hierarchy, name):
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
    return found


def kill_all(name: str, timeout_seconds: float = 10.0) -> None:
    """SIGKILL every process in /<name> until none is left (containers a stopped kubelet left behind)."""
    deadline = time.monotonic() + timeout_seconds
    while (left := pids(name)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def remove_root(name: str, timeout_seconds: float = 10.0) -> list[str]:
    """Kill what runs in /<name>, then remove its directories in every hierarchy; returns what could not
    be removed (empty when all is gone)."""
    kill_all(name, timeout_seconds)
    left: list[str] = []
    deadline = time.monotonic() + timeout_seconds
    for hierarchy in hierarchies():
        for directory in _tree(hierarchy, name):
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:  # EBUSY while the kernel reaps the last killed task
                    if time.monotonic() > deadline:
                        left.append(f"{directory}: {exc.strerror}")
                        break
                    time.sleep(0.05)
    return left


def leftovers(name: str) -> list[str]:
    """Directories of /<name> still present in any hierarchy."""
    return [str(d) for h in hierarchies() for d in _tree(h, name)]
