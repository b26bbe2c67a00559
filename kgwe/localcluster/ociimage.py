"""Single-layer OCI image archives from a few files, without a container tool.

The local cluster's node has no registry to pull from, so the images its pods use (the sandbox "pause"
image, CoreDNS, kube-scheduler) are written here from binaries built from source and imported into
containerd. The archive is an OCI image layout in a tar (what `ctr images import` and `skopeo` read); its
index names the image with `io.containerd.image.name` (the full reference containerd imports it under) and
`org.opencontainers.image.ref.name`. The layer is an uncompressed tar with fixed owners and times, so the
same inputs give the same digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kgwe.errors import KgweError

IMAGE_NAME_ANNOTATION = "io.containerd.image.name"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
_LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
_MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
_CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
# index.json of an archive someone hands us is read with this bound (a real one is a few hundred bytes).
_MAX_INDEX_BYTES = 1 << 20


@dataclass(frozen=True)
class ImageFile:
    """One file of the image: copied from `source`, at `path` (absolute, inside the image)."""

    path: str
    source: Path
    mode: int = 0o755


@dataclass(frozen=True)
class ImageSpec:
    """What an image holds and how its one process starts."""

    reference: str  # e.g. registry.k8s.io/pause:3.10.2
    files: Sequence[ImageFile]
    entrypoint: Sequence[str]
    user: str = "65532:65532"
    env: Sequence[str] = ("PATH=/usr/local/bin:/usr/bin:/bin",)
    directories: Mapping[str, int] = field(default_factory=dict)  # extra empty directories -> mode
    symlinks: Mapping[str, str] = field(default_factory=dict)  # path -> target
    labels: Mapping[str, str] = field(default_factory=dict)


def architecture() -> str:
    machine = platform.machine()
    try:
        return _GOARCH[machine]
    except KeyError:
        raise KgweError(f"no OCI architecture name known for machine type {machine!r}") from None


def _dir_info(path: str, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    return info


def _write_layer(spec: ImageSpec, out: Path) -> None:
    """The layer tar: parent directories, the extra directories, then the files (root-owned, mtime 0)."""
    directories: dict[str, int] = {}
    for path in [f.path for f in spec.files] + list(spec.symlinks):
        for parent in reversed(PurePosixPath(path.lstrip("/")).parents[:-1]):
            directories.setdefault(str(parent), 0o755)
    for path, mode in spec.directories.items():
        directories[path.strip("/")] = mode
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(directories):
            tar.addfile(_dir_info(path + "/", directories[path]))
        for f in sorted(spec.files, key=lambda f: f.path):
            info = tarfile.TarInfo(f.path.lstrip("/"))
            info.size = f.source.stat().st_size
            info.mode = f.mode
            with f.source.open("rb") as data:
                tar.addfile(info, data)
        for path, target in sorted(spec.symlinks.items()):
            link = tarfile.TarInfo(path.lstrip("/"))
            link.type = tarfile.SYMTYPE
            link.linkname = target
            link.mode = 0o777
            tar.addfile(link)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write_oci_archive(spec: ImageSpec, archive: Path) -> str:
    """Write `spec` as an OCI archive at `archive` (atomically); returns the manifest digest."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".oci-") as tmp:
        layer = Path(tmp) / "layer.tar"
        _write_layer(spec, layer)
        layer_digest = _sha256_file(layer)
        config_digest, config = _blob(
            json.dumps(
                {
                    "architecture": architecture(),
                    "os": "linux",
                    "config": {
                        "User": spec.user,
                        "Env": list(spec.env),
                        "Entrypoint": list(spec.entrypoint),
                        "WorkingDir": "/",
                        "Labels": dict(spec.labels),
                    },
                    "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
                },
                sort_keys=True,
            ).encode()
        )
        manifest_digest, manifest = _blob(
            json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": _MANIFEST_MEDIA_TYPE,
                    "config": {"mediaType": _CONFIG_MEDIA_TYPE, "digest": config_digest, "size": len(config)},
                    "layers": [
                        {"mediaType": _LAYER_MEDIA_TYPE, "digest": layer_digest, "size": layer.stat().st_size}
                    ],
                },
                sort_keys=True,
            ).encode()
        )
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": _MANIFEST_MEDIA_TYPE,
                    "digest": manifest_digest,
                    "size": len(manifest),
                    "annotations": {
                        IMAGE_NAME_ANNOTATION: spec.reference,
                        REF_NAME_ANNOTATION: spec.reference,
                    },
                }
            ],
        }
        partial = Path(tmp) / "archive.tar"
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            _add_bytes(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
            _add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
            for digest, data in ((config_digest, config), (manifest_digest, manifest)):
                _add_bytes(tar, "blobs/sha256/" + digest.removeprefix("sha256:"), data)
            tar.add(layer, "blobs/sha256/" + layer_digest.removeprefix("sha256:"), recursive=False)
        partial.replace(archive)
    return manifest_digest


def archive_reference(archive: Path) -> str | None:
    """The full image reference an OCI archive names in its index (containerd's annotation first, then the
    OCI ref name when it is a full reference rather than a bare tag); None when it names none."""
    try:
        with tarfile.open(archive) as tar:
            member = tar.getmember("index.json")
            if member.size > _MAX_INDEX_BYTES:
                raise KgweError(f"{archive}: index.json is {member.size} bytes; not an image index")
            data = tar.extractfile(member)
            index = json.loads(data.read() if data else b"{}")
    except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
        raise KgweError(f"{archive} is not an OCI image archive (index.json unreadable: {exc})") from None
    for entry in index.get("manifests") or []:
        annotations = entry.get("annotations") or {}
        name = annotations.get(IMAGE_NAME_ANNOTATION) or annotations.get(REF_NAME_ANNOTATION) or ""
        if "/" in name or ":" in name.rsplit("/", 1)[-1]:
            return str(name)
    return None
