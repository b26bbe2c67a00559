"""The KGWE OCI image for tests and bench/image.py: built by hack/image/build.sh (mmdebstrap + buildah, no
daemon), then run with `buildah run --isolation chroot` (no container runtime needed).

Builds go to the cache ($KGWE_CACHE_DIR/image, like the cluster binaries) and are reused while the image's
inputs and commit are unchanged, so a test session builds at most once.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kgwe.localcluster.controlplane import cache_base

# The image is built from a checkout (hack/image and the Containerfile are not in the wheel).
REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "image" / "build.sh"
RUN_TIMEOUT_SECONDS = 300


class ImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class BuiltImage:
    archive: Path  # the OCI archive
    reference: str  # e.g. ghcr.io/kgwe/kgwe:0.1.0


def image_cache_dir() -> Path:
    """Where the tests' image is built and reused: $KGWE_IMAGE_DIR (one per checkout when several checkouts
    share a host, so one's build never replaces the archive another is about to import), else the cache."""
    return Path(os.environ.get("KGWE_IMAGE_DIR") or cache_base() / "image")


def build_image(
    out_dir: Path | None = None, *, timeout_seconds: float = 3600, script: Path = BUILD_SCRIPT
) -> BuiltImage:
    """Run hack/image/build.sh (reusing an up-to-date archive in `out_dir`); its last line names it.
    `script`: the build script of another checkout (it builds the checkout it lives in)."""
    env_dir = str(out_dir or image_cache_dir())
    proc = subprocess.run(
        [str(script)],
        env={**os.environ, "KGWE_IMAGE_DIR": env_dir},
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
    )
    if proc.returncode != 0:
        raise ImageError(f"hack/image/build.sh failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    archive, reference = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    return BuiltImage(Path(archive), reference)


def _buildah(*args: str, timeout_seconds: float = RUN_TIMEOUT_SECONDS) -> str:
    proc = subprocess.run(["buildah", *args], capture_output=True, text=True, timeout=timeout_seconds)
    if proc.returncode != 0:
        raise ImageError(f"buildah {' '.join(args[:2])} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout.strip()


class Container:
    """A buildah working container of the image: run commands in it, or look at its files."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(
        self,
        argv: Sequence[str],
        *,
        volumes: Sequence[str] = (),
        host_network: bool = False,
        timeout_seconds: float = RUN_TIMEOUT_SECONDS,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` as the image's user with chroot isolation; `volumes` as in `-v SRC:DST[:ro]`."""
        cmd = ["buildah", "run", "--isolation", "chroot"]
        if host_network:
            cmd += ["--network", "host"]
        for volume in volumes:
            cmd += ["-v", volume]
        cmd += [self.name, "--", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_seconds)

    def config(self) -> dict:
        """The image's OCI config (user, env, entrypoint, cmd, labels)."""
        return json.loads(_buildah("inspect", "--type", "container", self.name))["OCIv1"]["config"]

    @contextmanager
    def rootfs(self) -> Iterator[Path]:
        path = Path(_buildah("mount", self.name))
        try:
            yield path
        finally:
            _buildah("umount", self.name)


@contextmanager
def container(image: BuiltImage) -> Iterator[Container]:
    """A working container from the OCI archive; removed (with its local image copy) afterwards."""
    name = _buildah("from", "--quiet", f"oci-archive:{image.archive}")
    image_id = json.loads(_buildah("inspect", "--type", "container", name)).get("FromImageID", "")
    try:
        yield Container(name)
    finally:
        subprocess.run(["buildah", "rm", name], capture_output=True)
        if image_id:
            subprocess.run(["buildah", "rmi", image_id], capture_output=True)


def uncompressed_size_bytes(archive: Path) -> int:
    """Sum of the image's layers as unpacked tar streams (what `image size, uncompressed` means)."""
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> IO[bytes]:
            name = digest if digest == "index.json" else f"blobs/{digest.replace(':', '/')}"
            member = tar.extractfile(name)
            if member is None:
                raise ImageError(f"{archive}: blob {digest} missing")
            return member

        index = json.load(blob("index.json"))
        manifest = json.load(blob(index["manifests"][0]["digest"]))
        total = 0
        for layer in manifest["layers"]:
            stream = blob(layer["digest"])
            gzipped = layer["mediaType"].endswith("+gzip")
            inflate = zlib.decompressobj(wbits=31) if gzipped else None
            while chunk := stream.read(1 << 20):
                total += len(inflate.decompress(chunk)) if inflate else len(chunk)
        return total
