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


def run_go_build(script: Path, built: str, *args: str) -> list[str]:
    """Run a build script of hack/ that compiles with Go (reusing what it built before); its stdout lines.
    `built` says what it builds, for the message when Go is missing; the script's own messages go to
    stderr, so a failure says where to read them."""
    if shutil.which("go") is None:
        raise ControlPlaneError(
            f"Go is not installed: {built}. Install Go >= 1.26 from https://go.dev/dl/ and put it on PATH."
        )
    proc = subprocess.run(["bash", str(script), *args], stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        named = " ".join(["hack/" + script.name, *args])
        raise ControlPlaneError(f"{named} failed (exit {proc.returncode}); its message is above")
    return proc.stdout.strip().splitlines()


def reported_dirs(lines: list[str], script: str, wanted: tuple[str, ...]) -> dict[str, Path]:
    """The `name=DIR` lines a build script printed, for every name in `wanted`."""
    dirs = dict(line.split("=", 1) for line in lines if "=" in line)
    missing = [name for name in wanted if name not in dirs]
    if missing:
        raise ControlPlaneError(f"hack/{script} did not report {', '.join(missing)}")
    return {name: Path(dirs[name]) for name in wanted}


def tool_dir(name: str) -> Path:
    """The directory holding the binaries of hack/<name>/ (built on first use; needs Go >= 1.26)."""
    lines = run_go_build(TOOL_SCRIPT, f"the tests build {name} from Go modules (hack/{name}/go.mod)", name)
    if not lines:
        raise ControlPlaneError(f"hack/tool-bins.sh {name} printed no directory; its message is above")
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
