"""Where KGWE's checked-in data lives, both in a source checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

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
