"""Go tools the tests run beside the control plane (helm, Flux's kustomize-controller), built once.

Each tool is a wrapper module under hack/<name>/ built by hack/tool-bins.sh into the same cache as the
Kubernetes binaries; the script reuses a build whose MANIFEST matches and prints the directory last.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from kgwe.localcluster.controlplane import ControlPlaneError
from kgwe.resources import hack_dir

TOOL_SCRIPT = hack_dir() / "tool-bins.sh"


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


def recorded_build_seconds(directory: Path, key: str, version: str) -> tuple[float | None, str]:
    """The latest cold build of `key`=`version` from build-times.log, else this cache's own build time.

    hack/cluster-bins.sh and hack/tool-bins.sh append one line per build (`<time> <key>=<version> seconds=N
    gocache=cold|shared ...`). A cold figure comes from a `--cold` build (empty Go build cache; the module
    download cache may be warm) or a genuine first build; a rebuild on a warm Go cache is much faster and is
    reported as such.
    """
    log = directory.parent / "build-times.log"
    lines = log.read_text().splitlines() if log.is_file() else []
    for line in reversed(lines):
        fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
        if fields.get(key) == version and fields.get("gocache") == "cold":
            return float(fields["seconds"]), f"cold Go build cache, {line.split()[0]}"
    own = directory / "build-seconds"
    if own.is_file():
        return float(own.read_text()), "this cache's build; Go build cache state unknown"
    return None, "not recorded"
