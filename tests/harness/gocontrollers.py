"""Go-built controllers the tests run beside a control plane (Flux's kustomize-controller, Kueue): the
release a wrapper module pins, that release's files (CRDs, manifests) from the Go module cache, and the
controller as a process that is ready when its health endpoint says so."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from kgwe.localcluster.controlplane import ControlPlaneError, _die_with_parent, tail
from tests.harness.processes import stop
from tests.harness.waiting import wait_for


def pinned_version(go_mod: Path, module: str) -> str:
    """The version of `module` a wrapper module's go.mod requires."""
    match = re.search(rf"^\s*{re.escape(module)}\s+(v\S+)", go_mod.read_text(), re.MULTILINE)
    if not match:
        raise ControlPlaneError(f"{go_mod} does not pin {module}")
    return match.group(1)


def module_dir(module: str, version: str) -> Path:
    """A module's source in the Go module cache (`go mod download`, from the proxy on first use)."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        env={**os.environ, "GOFLAGS": "", "GOTOOLCHAIN": "local"},
    )
    info = json.loads(proc.stdout or "{}") if proc.stdout.strip().startswith("{") else {}
    if proc.returncode != 0 or "Dir" not in info:
        raise ControlPlaneError(
            f"go mod download {module}@{version} failed: {info.get('Error') or proc.stderr}"
        )
    return Path(info["Dir"])


class ControllerProcess:
    """One controller process, its output in `log_path`, ready once GET `ready_url` answers 200."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name, self.log_path = name, log_path
        self._proc: subprocess.Popen[bytes] | None = None

    def start(
        self, argv: Sequence[str], env: Mapping[str, str], ready_url: str, timeout_seconds: float = 120
    ) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        proc = self._proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise ControlPlaneError(f"{self.name} exited {proc.returncode}:\n{tail(self.log_path)}")
            with contextlib.suppress(OSError), urllib.request.urlopen(ready_url, timeout=2) as resp:
                return resp.status == 200
            return False

        wait_for(f"{self.name} ready", ready, timeout_seconds, describe=lambda: tail(self.log_path, 40))

    def stop(self) -> None:
        stop(self._proc)
        self._proc = None
