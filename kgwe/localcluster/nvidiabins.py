"""NVIDIA's GPU stack for the local GPU node, built from NVIDIA's source archives by hack/nvidia-bins.sh: the
mock NVML library (k8s-test-infra's `libnvidia-ml.so.1` and its GPU profiles) and the device plugin's three
commands (nvidia-device-plugin, gpu-feature-discovery, config-manager).

The script runs once per cache (`make bins`, or the first `kgwe cluster up --gpu-profile`), reuses what
matches and says what it does on stderr; this module only reads what it reports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.localcluster.controlplane import ControlPlaneError
from kgwe.localcluster.gotools import reported_dirs, run_go_build
from kgwe.resources import hack_dir

NVIDIA_BUILD_SCRIPT = hack_dir() / "nvidia-bins.sh"
NVML_LIBRARY = "libnvidia-ml.so.1"  # the soname every NVML client dlopen()s
DEVICE_PLUGIN_COMMANDS = ("nvidia-device-plugin", "gpu-feature-discovery", "config-manager")
_PROFILE_PREFIX = "mock-nvml-config-"


class UnknownGpuProfile(KgweError):
    """A --gpu-profile the mock NVML library does not ship."""


@dataclass(frozen=True)
class NvidiaBinaries:
    """Where hack/nvidia-bins.sh put the mock NVML library (with its profiles) and the device plugin."""

    nvml_mock_dir: Path
    device_plugin_dir: Path

    @property
    def library(self) -> Path:
        """The library file itself (`libnvidia-ml.so.<driver version>`), not its soname link."""
        return (self.nvml_mock_dir / NVML_LIBRARY).resolve()

    @property
    def driver_version(self) -> str:
        """The driver version the library's file name carries (`550.163.01`)."""
        return self.library.name.removeprefix("libnvidia-ml.so.")

    @property
    def device_plugin_version(self) -> str:
        """`v0.20.0`, from the build's MANIFEST (its first line names the archive)."""
        first = (self.device_plugin_dir / "MANIFEST").read_text().splitlines()[0]
        return first.removeprefix("k8s-device-plugin-")

    def command(self, name: str) -> Path:
        return self.device_plugin_dir / name

    def profiles(self) -> dict[str, Path]:
        """Shipped GPU profiles by short name (`h100` -> configs/mock-nvml-config-h100.yaml)."""
        found = sorted((self.nvml_mock_dir / "configs").glob(f"{_PROFILE_PREFIX}*.yaml"))
        return {p.stem.removeprefix(_PROFILE_PREFIX): p for p in found}

    def profile(self, name: str) -> Path:
        profiles = self.profiles()
        if name not in profiles:
            raise UnknownGpuProfile(
                f"unknown GPU profile {name!r}: the mock NVML library ships {', '.join(profiles) or 'none'}"
            )
        return profiles[name]

    def to_dict(self) -> dict[str, str]:
        return {"nvml_mock_dir": str(self.nvml_mock_dir), "device_plugin_dir": str(self.device_plugin_dir)}

    @classmethod
    def from_dict(cls, data: Mapping[str, str]) -> NvidiaBinaries:
        found = cls(Path(data["nvml_mock_dir"]), Path(data["device_plugin_dir"]))
        found.check()
        return found

    def check(self) -> None:
        """Every program and the library are there (a cache emptied by hand fails here, not mid-start)."""
        wanted = [self.command(c) for c in DEVICE_PLUGIN_COMMANDS]
        missing = [str(p) for p in wanted if not os.access(p, os.X_OK)]
        if not (self.nvml_mock_dir / NVML_LIBRARY).exists():
            missing.append(str(self.nvml_mock_dir / NVML_LIBRARY))
        if missing:
            raise ControlPlaneError(f"NVIDIA's GPU stack is missing: {', '.join(missing)} (make bins)")


def find_nvidia_binaries() -> NvidiaBinaries:
    """Build (or reuse) NVIDIA's mock NVML library and device plugin; needs Go >= 1.26, gcc and NVIDIA's
    source archives (hack/nvidia-bins.sh says where it looks)."""
    built = "NVIDIA's device plugin and mock NVML library are built from source (hack/nvidia-bins.sh)"
    lines = run_go_build(NVIDIA_BUILD_SCRIPT, built)
    dirs = reported_dirs(lines, NVIDIA_BUILD_SCRIPT.name, ("nvml-mock", "device-plugin"))
    found = NvidiaBinaries(dirs["nvml-mock"], dirs["device-plugin"])
    found.check()
    return found
