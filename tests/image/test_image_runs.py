"""KGWE runs inside the built image (buildah run --isolation chroot), as its non-root user, and the image
holds only what it should: precompiled bytecode, nothing writable outside /tmp, no compilers, pip, caches."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from kgwe import __version__
from kgwe.resources import sample_repo_dir
from tests.harness.image import REPO_ROOT

from .test_image_sources import containerfile_config, project

pytestmark = [pytest.mark.image, pytest.mark.timeout(3600)]

UID = 65532


def test_kgwe_version_and_validate_run_inside_the_image(image_container, tmp_path):
    version = image_container.run(["kgwe", "--version"])
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"kgwe {__version__}"

    good = image_container.run(["kgwe", "validate", "/policy"], volumes=[f"{sample_repo_dir()}:/policy:ro"])
    assert good.returncode == 0, good.stderr
    files = len(list(sample_repo_dir().rglob("*.yaml")))  # the sample's policy files, wherever they are
    assert good.stdout.startswith(f"/policy: valid — {files} files"), good.stdout

    broken = tmp_path / "broken"
    shutil.copytree(sample_repo_dir(), broken)
    scoring = broken / "scoring" / "default.yaml"
    lines = scoring.read_text().splitlines(keepends=True)
    line = next(i for i, text in enumerate(lines) if text.startswith("  strategy: "))
    lines[line] = "  strategy: Sideways\n"
    scoring.write_text("".join(lines))
    os.chmod(tmp_path, 0o755)  # the image's user must reach it
    bad = image_container.run(["kgwe", "validate", "/policy"], volumes=[f"{broken}:/policy:ro"])
    assert bad.returncode == 1, (bad.stdout, bad.stderr)
    want = f"scoring/default.yaml:{line + 1}:3: error: ScoringProfile/default spec.strategy"
    assert want in bad.stdout, bad.stdout


def test_the_trimmed_dependencies_still_serve_kgwe_inside_the_image(image_container):
    """Test suites and kubernetes.aio are stripped from the image: the planner (scipy's MILP), the forecast
    (statsmodels, pandas) and the Kubernetes client still run."""
    plan = image_container.run(["kgwe", "plan-mig", "/policy"], volumes=[f"{sample_repo_dir()}:/policy:ro"])
    assert plan.returncode == 0, plan.stderr
    assert "pool inference-h100:" in plan.stdout
    script = (
        "from kgwe.cost.forecast import forecast_daily; import kubernetes.client, kubernetes.watch; "
        "f = forecast_daily([10.0 + (i % 7) for i in range(42)], 7); print(f.method, len(f.values))"
    )
    forecast = image_container.run(["python3", "-c", script])
    assert forecast.returncode == 0, forecast.stderr
    assert forecast.stdout.split() == ["holt-winters(weekly)+ses+mean7", "7"]


def test_image_config_equals_the_containerfile_and_carries_the_oci_labels(image_container, kgwe_image):
    config = image_container.config()
    want = containerfile_config()
    assert config["User"] == want["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == want["Entrypoint"] == ["kgwe"]
    assert config["Cmd"] == want["Cmd"]
    assert config["Env"] == want["Env"]
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]
    labels = config["Labels"]
    for key in ("title", "description", "licenses", "source", "version"):
        name = f"org.opencontainers.image.{key}"
        assert labels[name] == want["Labels"][name], name
    assert labels["org.opencontainers.image.version"] == project()["version"]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert labels["org.opencontainers.image.revision"].removesuffix("-dirty") == head
    assert kgwe_image.reference == f"ghcr.io/kgwe/kgwe:{project()['version']}"


def _writable_by_user(path: Path, st: os.stat_result) -> bool:
    mode = st.st_mode
    return bool(
        (st.st_uid == UID and mode & stat.S_IWUSR)
        or (st.st_gid == UID and mode & stat.S_IWGRP)
        or mode & stat.S_IWOTH
    )


def test_image_is_lean_and_read_only_root_friendly(image_container):
    with image_container.rootfs() as root:
        venv = root / "opt" / "kgwe"
        (lib,) = (venv / "lib").glob("python3.*")
        site = lib / "site-packages"
        tag = "cpython-" + lib.name.removeprefix("python").replace(".", "")
        assert (venv / "bin" / "kgwe").is_file()
        assert (site / "kgwe" / "_data" / "templates").is_dir()  # the wheel, with its data

        # no compilers, no pip, no caches or package lists
        for tool in ("gcc", "cc", "c++", "g++", "clang", "make"):
            assert not (root / "usr" / "bin" / tool).exists(), tool
        assert not (venv / "bin" / "pip").exists() and not (site / "pip").exists()
        assert not list((root / "var" / "lib" / "apt" / "lists").glob("*Packages*"))
        assert not list((root / "var" / "cache" / "apt").glob("*.bin"))
        assert not (root / "root" / ".cache").exists()
        assert not list((root / "tmp").iterdir())

        # bytecode precompiled for every module (the image never writes any), valid whatever the files'
        # mtimes: unchecked-hash .pyc (flags 0b01), else Python would recompile every module at each start
        stdlib = root / "usr" / "lib" / lib.name
        modules = [*site.rglob("*.py"), *stdlib.glob("*.py"), *(stdlib / "json").glob("*.py")]
        stale = []
        for py in modules:
            pyc = py.parent / "__pycache__" / f"{py.stem}.{tag}.pyc"
            if not pyc.is_file() or int.from_bytes(pyc.read_bytes()[4:8], "little") != 0b01:
                stale.append(py)
        assert not stale, f"{len(stale)} of {len(modules)} modules without usable .pyc, e.g. {stale[:3]}"

        # the user exists, and can write nowhere but the scratch places a read-only root keeps as volumes
        passwd = (root / "etc" / "passwd").read_text()
        assert f"kgwe:x:{UID}:{UID}:" in passwd
        writable = []
        for dirpath, dirnames, filenames in os.walk(root):
            rel = "/" + os.path.relpath(dirpath, root)
            if rel.startswith(("/proc", "/sys", "/dev")):
                dirnames[:] = []
                continue
            for name in [*dirnames, *filenames]:
                path = Path(dirpath) / name
                st = path.lstat()
                if not stat.S_ISLNK(st.st_mode) and _writable_by_user(path, st):
                    writable.append("/" + str(path.relative_to(root)))
        assert sorted(writable) == ["/run/lock", "/tmp", "/var/tmp"], writable  # Debian's sticky scratch dirs
