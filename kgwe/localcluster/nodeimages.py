"""The images the real node's own pods use, made from binaries built here and named as upstream names
them, so manifests written for a real cluster find them without a registry:

- the sandbox image every pod starts with (`registry.k8s.io/pause:<tag of build/pause>`), as upstream's:
  the static pause binary at /pause, user 65535;
- CoreDNS (`registry.k8s.io/coredns/coredns:<version>`): /coredns, non-root;
- kube-scheduler (`registry.k8s.io/kube-scheduler:<kubernetes version>`): the binary at
  /usr/local/bin/kube-scheduler (on PATH, as in upstream's image), non-root — KGWE's chart runs its
  second scheduler from this reference by default.

Archives are cached beside the binaries, keyed by what they are made of.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from kgwe.localcluster.controlplane import cache_base
from kgwe.localcluster.nodebins import NodeBinaries
from kgwe.localcluster.ociimage import ImageFile, ImageSpec, write_oci_archive

PAUSE_REPOSITORY = "registry.k8s.io/pause"
COREDNS_REPOSITORY = "registry.k8s.io/coredns/coredns"
KUBE_SCHEDULER_REPOSITORY = "registry.k8s.io/kube-scheduler"
NONROOT_USER = "65532:65532"  # distroless "nonroot", the user of upstream's CoreDNS and kube-scheduler images
PAUSE_USER = "65535:65535"  # build/pause/Dockerfile


@dataclass(frozen=True)
class NodeImages:
    """References of the node's own images (what containerd's config and the DNS add-on name)."""

    pause: str
    coredns: str
    kube_scheduler: str


def node_images(binaries: NodeBinaries) -> NodeImages:
    return NodeImages(
        pause=f"{PAUSE_REPOSITORY}:{binaries.pause_version}",
        coredns=f"{COREDNS_REPOSITORY}:{binaries.coredns_version}",
        kube_scheduler=f"{KUBE_SCHEDULER_REPOSITORY}:{binaries.kubernetes.kubernetes_version}",
    )


def image_specs(binaries: NodeBinaries) -> list[ImageSpec]:
    refs = node_images(binaries)
    return [
        ImageSpec(refs.pause, [ImageFile("/pause", binaries.pause)], ["/pause"], user=PAUSE_USER, env=()),
        ImageSpec(refs.coredns, [ImageFile("/coredns", binaries.coredns)], ["/coredns"], user=NONROOT_USER),
        ImageSpec(
            refs.kube_scheduler,
            [ImageFile("/usr/local/bin/kube-scheduler", binaries.kubernetes.path("kube-scheduler"))],
            ["/usr/local/bin/kube-scheduler"],
            user=NONROOT_USER,
            directories={"/tmp": 0o1777},
        ),
    ]


def _key(spec: ImageSpec) -> str:
    """What the archive is made of: the spec and each file's identity (path, size, mtime)."""
    parts = [
        repr(
            (
                spec.reference,
                tuple(spec.entrypoint),
                spec.user,
                tuple(spec.env),
                sorted(spec.directories.items()),
                sorted(spec.symlinks.items()),
            )
        )
    ]
    for f in spec.files:
        st = f.source.stat()
        parts.append(f"{f.path} {f.source} {st.st_size} {st.st_mtime_ns} {f.mode:o}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def image_archives(binaries: NodeBinaries, directory: Path | None = None) -> list[tuple[Path, str]]:
    """(archive, reference) of each node image, written once per content into the cache."""
    out_dir = directory or cache_base() / "node-images"
    archives = []
    for spec in image_specs(binaries):
        name = spec.reference.rsplit("/", 1)[-1].replace(":", "-")
        archive = out_dir / f"{name}-{_key(spec)}.oci.tar"
        if not archive.is_file():
            for stale in out_dir.glob(f"{name}-*.oci.tar"):
                stale.unlink(missing_ok=True)
            write_oci_archive(spec, archive)
        archives.append((archive, spec.reference))
    return archives
