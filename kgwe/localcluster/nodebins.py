"""The real node's programs: kubelet and kube-proxy (hack/cluster-bins.sh), containerd, the CNI plugins,
CoreDNS and the pause binary (hack/node-bins.sh), runc, nft and iptables from Debian.

Everything is built from source once into the same cache as the control plane's binaries; the build
scripts reuse what matches and say what they do on stderr.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kgwe.localcluster.controlplane import Binaries, ControlPlaneError, find_binaries
from kgwe.localcluster.gotools import reported_dirs, run_go_build
from kgwe.resources import hack_dir

NODE_BUILD_SCRIPT = hack_dir() / "node-bins.sh"
_COMPONENTS = ("containerd", "cni", "coredns", "pause", "runc")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")


@dataclass(frozen=True)
class NodeBinaries:
    """Paths of every program the real node runs, and the versions its images are named after."""

    kubernetes: Binaries  # kubelet, kube-proxy, kube-scheduler (for its image)
    containerd_dir: Path  # containerd, ctr, containerd-shim-runc-v2
    cni_dir: Path
    coredns: Path
    pause: Path
    runc: Path
    containerd_version: str
    coredns_version: str
    pause_version: str

    @property
    def containerd(self) -> Path:
        return self.containerd_dir / "containerd"

    @property
    def ctr(self) -> Path:
        return self.containerd_dir / "ctr"

    def to_dict(self) -> dict[str, str]:
        """Plain strings (handed to the `kgwe cluster up` supervisor, which needs not build again)."""
        return {
            "kubernetes_dir": str(self.kubernetes.directory),
            "kubernetes_version": self.kubernetes.kubernetes_version,
            "containerd_dir": str(self.containerd_dir),
            "cni_dir": str(self.cni_dir),
            "coredns": str(self.coredns),
            "pause": str(self.pause),
            "runc": str(self.runc),
            "containerd_version": self.containerd_version,
            "coredns_version": self.coredns_version,
            "pause_version": self.pause_version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, str]) -> NodeBinaries:
        k8s_dir = Path(data["kubernetes_dir"])
        manifest = dict(
            line.split("=", 1) for line in (k8s_dir / "MANIFEST").read_text().splitlines() if "=" in line
        )
        found = cls(
            kubernetes=Binaries(k8s_dir, data["kubernetes_version"], manifest),
            containerd_dir=Path(data["containerd_dir"]),
            cni_dir=Path(data["cni_dir"]),
            coredns=Path(data["coredns"]),
            pause=Path(data["pause"]),
            runc=Path(data["runc"]),
            containerd_version=data["containerd_version"],
            coredns_version=data["coredns_version"],
            pause_version=data["pause_version"],
        )
        found.check()
        return found

    def check(self) -> None:
        """Every program is there and executable (a cache emptied by hand fails here, not mid-start)."""
        wanted = [
            self.kubernetes.path("kubelet"),
            self.kubernetes.path("kube-proxy"),
            self.containerd,
            self.ctr,
            self.containerd_dir / "containerd-shim-runc-v2",
            self.coredns,
            self.pause,
            self.runc,
            *(self.cni_dir / p for p in CNI_PLUGINS),
        ]
        missing = [str(p) for p in wanted if not os.access(p, os.X_OK)]
        if missing:
            raise ControlPlaneError(f"the real node's programs are missing: {', '.join(missing)}")


def _manifest_value(directory: Path, key: str) -> str:
    manifest = directory / "MANIFEST"
    for line in manifest.read_text().splitlines() if manifest.is_file() else []:
        name, _, value = line.partition("=")
        if name == key:
            return value
    raise ControlPlaneError(f"{manifest} does not say which {key} version it holds")


def find_node_binaries(kubernetes: Binaries | None = None) -> NodeBinaries:
    """Build (or reuse) everything the real node runs; needs Go >= 1.26 and gcc, and root when runc, nft
    or iptables must be installed."""
    kubernetes = kubernetes or find_binaries()
    built = "the real node's containerd, CNI plugins and CoreDNS are built from Go modules"
    lines = run_go_build(NODE_BUILD_SCRIPT, f"{built} (hack/{NODE_BUILD_SCRIPT.name})")
    dirs = reported_dirs(lines, NODE_BUILD_SCRIPT.name, _COMPONENTS)
    containerd_dir, coredns_dir, pause_dir = dirs["containerd"], dirs["coredns"], dirs["pause"]
    found = NodeBinaries(
        kubernetes=kubernetes,
        containerd_dir=containerd_dir,
        cni_dir=dirs["cni"],
        coredns=coredns_dir / "coredns",
        pause=pause_dir / "pause",
        runc=dirs["runc"] / "runc",
        containerd_version=_manifest_value(containerd_dir, "containerd"),
        coredns_version=_manifest_value(coredns_dir, "coredns"),
        pause_version=_manifest_value(pause_dir, "pause"),
    )
    found.check()
    return found
