"""Where KGWE's checked-in data lives, both in a source checkout and in an installed wheel."""

from __future__ import annotations

import os
from pathlib import Path

from kgwe.errors import KgweError

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _PACKAGE_DIR.parent


def _data_dir(name: str) -> Path:
    """Top-level folder `name` of the checkout, or its copy under kgwe/_data in a wheel."""
    in_checkout = _REPO_ROOT / name
    if in_checkout.is_dir():
        return in_checkout
    return _PACKAGE_DIR / "_data" / name


def templates_dir() -> Path:
    return _data_dir("templates")


def schemas_dir() -> Path:
    return _data_dir("schemas")


def deploy_dir() -> Path:
    return _data_dir("deploy")


def sample_repo_dir() -> Path:
    return _data_dir("sample-repo")


def workload_examples_dir() -> Path:
    """docs/examples/gpuworkloads: the seed GPUWorkload examples (the demo applies two of them)."""
    return _data_dir("docs") / "examples/gpuworkloads"


def hack_dir() -> Path:
    """The recipe for the local control plane's binaries (cluster-bins.sh and the Go wrapper module that
    pins the Kubernetes release), so an installed `kgwe demo` can build them too."""
    return _data_dir("hack")


SHARED_DATA_FALLBACK = Path("/work/shared/data")


def shared_data_dir() -> Path:
    """The public traces (`shared/data`): $KGWE_DATA, else a `shared/data` beside the checkout or above it,
    else the development machines' SHARED_DATA_FALLBACK (a clone made elsewhere, e.g. in /tmp, still finds
    them)."""
    env = os.environ.get("KGWE_DATA")
    if env:
        if not Path(env).is_dir():
            raise KgweError(f"KGWE_DATA={env} is not a directory")
        return Path(env)
    candidates = [p / "shared" / "data" for p in _PACKAGE_DIR.parents] + [SHARED_DATA_FALLBACK]
    for c in candidates:
        if c.is_dir():
            return c
    raise KgweError("public trace data not found: set KGWE_DATA to the shared/data folder")
