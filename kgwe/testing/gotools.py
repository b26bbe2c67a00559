"""Go tools the tests run beside the control plane (helm, Flux's kustomize-controller), built once.

Each tool is a wrapper module under hack/<name>/ built by hack/tool-bins.sh into the same cache as the
Kubernetes binaries; the script reuses a build whose MANIFEST matches and prints the directory last.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from kgwe.testing.controlplane import REPO_ROOT, ControlPlaneError

TOOL_SCRIPT = REPO_ROOT / "hack" / "tool-bins.sh"


def tool_dir(name: str) -> Path:
    """The directory holding the binaries of hack/<name>/ (built on first use; needs Go >= 1.26)."""
    if shutil.which("go") is None:
        raise ControlPlaneError(
            f"Go is not installed: the tests build {name} from Go modules (hack/{name}/go.mod). "
            "Install Go >= 1.26 from https://go.dev/dl/ and put it on PATH."
        )
    proc = subprocess.run(["bash", str(TOOL_SCRIPT), name], stdout=subprocess.PIPE, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise ControlPlaneError(
            f"hack/tool-bins.sh {name} failed (exit {proc.returncode}); its message is above"
        )
    return Path(lines[-1])


def build_seconds(directory: Path) -> int | None:
    """Seconds the build of `directory` took (written by hack/tool-bins.sh), if recorded."""
    try:
        return int((directory / "build-seconds").read_text().strip())
    except (OSError, ValueError):
        return None
