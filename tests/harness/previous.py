"""The KGWE release the upgrade test starts from: the chart and image of the commit in
tests/compat/previous-commit, built once into the cache by hack/previous-image.sh (`make bins` runs it
before any test; here it only finds the cached build, or builds it once when run without make)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.harness.image import REPO_ROOT, ImageError

SCRIPT = REPO_ROOT / "hack" / "previous-image.sh"
COMMIT_FILE = REPO_ROOT / "tests" / "compat" / "previous-commit"


@dataclass(frozen=True)
class PreviousRelease:
    archive: Path  # its OCI image, named `reference`
    reference: str  # ghcr.io/kgwe/kgwe-previous:<its version>
    chart: Path  # its deploy/helm/kgwe
    commit: str


def previous_commit() -> str:
    return COMMIT_FILE.read_text().strip()


def previous_release(timeout_seconds: float = 3600) -> PreviousRelease:
    proc = subprocess.run(
        [str(SCRIPT)], capture_output=True, text=True, timeout=timeout_seconds, env=dict(os.environ)
    )
    if proc.returncode != 0:
        raise ImageError(f"hack/previous-image.sh failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    archive, reference, chart, commit = proc.stdout.strip().splitlines()[-1].split(" ")
    return PreviousRelease(Path(archive), reference, Path(chart), commit)
