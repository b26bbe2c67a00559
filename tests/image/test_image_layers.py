"""The image in three layers — the base, the dependencies, KGWE — so an upgrade that changes only KGWE pulls
only KGWE's layer: the last layer holds KGWE's files and nothing else, and a rebuild after a change to
KGWE reuses the first two byte for byte (the same digests)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.harness.image import BUILD_SCRIPT, REPO_ROOT, BuiltImage, build_image

pytestmark = [pytest.mark.image, pytest.mark.timeout(3600)]

SITE = "opt/kgwe/lib/python3.13/site-packages/"


def layers(archive: Path) -> list[dict]:
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        name = "blobs/" + index["manifests"][0]["digest"].replace(":", "/")
        return json.load(tar.extractfile(name))["layers"]  # type: ignore[arg-type]


def layer_files(archive: Path, layer: dict) -> list[tarfile.TarInfo]:
    with tarfile.open(archive) as tar:
        blob = tar.extractfile("blobs/" + layer["digest"].replace(":", "/"))
        assert blob is not None
        data = gzip.decompress(blob.read())
    with tarfile.open(fileobj=io.BytesIO(data)) as inner:
        return inner.getmembers()


def test_the_last_layer_holds_kgwe_and_nothing_else(kgwe_image: BuiltImage):
    base, deps, app = layers(kgwe_image.archive)
    files = [m for m in layer_files(kgwe_image.archive, app) if not m.isdir()]
    assert files
    outside = [
        m.name
        for m in files
        if not m.name.startswith((f"{SITE}kgwe/", f"{SITE}kgwe-"))
        and m.name not in ("opt/kgwe/bin/kgwe", "opt/kgwe/bin/kubectl-kgwe")
    ]
    assert outside == [], "KGWE's layer must hold only KGWE's files"
    assert any(m.name.endswith("/kgwe/cli.py") for m in files)
    assert any(m.name.endswith(".pyc") for m in files)  # precompiled there, not at start
    deps_files = [m.name for m in layer_files(kgwe_image.archive, deps) if not m.isdir()]
    assert deps_files and all(n.startswith("opt/kgwe/") for n in deps_files)
    assert not any(n.startswith(f"{SITE}kgwe/") for n in deps_files)
    assert any(n.startswith(f"{SITE}kubernetes/") for n in deps_files)
    base_files = [m.name for m in layer_files(kgwe_image.archive, base) if not m.isdir()]
    assert not any(n.startswith("opt/kgwe/") for n in base_files) and "usr/bin/git" in base_files
    print(json.dumps({"layer_mb": [round(x["size"] / 1e6, 1) for x in (base, deps, app)]}))


def _copy_checkout(to: Path) -> None:
    """The checkout's files (as git sees them) in a repository of their own."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, check=True,
    ).stdout.split(b"\0")  # fmt: skip
    for rel in filter(None, files):
        source = REPO_ROOT / rel.decode()
        if source.is_file():
            target = to / rel.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode & 0o777)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@x"]
    subprocess.run([*git, "init", "-q"], cwd=to, check=True)
    subprocess.run([*git, "add", "-A"], cwd=to, check=True)
    subprocess.run([*git, "commit", "-qm", "copy"], cwd=to, check=True)


def test_a_change_to_kgwe_alone_rebuilds_only_its_layer(kgwe_image: BuiltImage, tmp_path):
    checkout, out = tmp_path / "checkout", tmp_path / "image"
    _copy_checkout(checkout)
    (checkout / "kgwe" / "errors.py").write_text(
        (checkout / "kgwe" / "errors.py").read_text() + "\n# a change to KGWE alone\n"
    )
    out.mkdir()
    for runtime in kgwe_image.archive.parent.glob("runtime-*.oci.tar"):  # the cached base and dependencies
        (out / runtime.name).hardlink_to(runtime)
    script = checkout / BUILD_SCRIPT.relative_to(REPO_ROOT)
    rebuilt = build_image(out, script=script)
    before, after = layers(kgwe_image.archive), layers(rebuilt.archive)
    assert [x["digest"] for x in after[:2]] == [x["digest"] for x in before[:2]]  # nothing to pull
    assert after[2]["digest"] != before[2]["digest"]
    print(json.dumps({"app_layer_mb": round(after[2]["size"] / 1e6, 2)}))
