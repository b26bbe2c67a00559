"""The local GPU node's NVIDIA "driver": NVIDIA's mock NVML library and its GPU profile, laid out where the
GPU Operator keeps a containerized driver, and the mock's failure injection.

The driver root is `/run/nvidia/driver` (the GPU Operator's `driverInstallDir`); inside it the mock's own
convention (docs/facts/nvidia-stack.md §1): the library at `usr/lib64/libnvidia-ml.so.<driver>` with its
`libnvidia-ml.so.1` link, the profile at `config/config.yaml`. Any process that loads the library from
there finds the profile without being told, and re-reads `config/overrides.yaml` (about once a second) while
it runs: that file is how a failure is injected into GPUs that are already in use.

The mock models a failure per NVML session of a process: a device "trips" on the next guarded NVML call
(temperature, ECC counters, memory info...) made while the override is there, and stays tripped until the
override goes or the process's last nvmlShutdown drops its devices; an Xid goes to the first event wait
that claims it. The agent makes those calls every period. NVIDIA's device plugin v0.20.0 makes them only
while it (re)starts (nvidiastack.restart_device_plugin: SIGHUP, as config-manager does), and what follows
is NVIDIA's code meeting the failure (docs/nvidia-stack.md): a lost GPU stops the plugin from starting at
all; an Xid is taken by the health check of the run that was just stopped, or of the new one (which
withdraws the GPU: nvidiastack.fail_and_withdraw restarts it until it does).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from kgwe.errors import KgweError
from kgwe.localcluster.nvidiabins import NVML_LIBRARY, NvidiaBinaries

DRIVER_ROOT = Path("/run/nvidia/driver")  # the GPU Operator's driver root (hostPaths.driverInstallDir)
LIBRARY_DIR = "usr/lib64"  # relative to a driver root: where the mock looks for itself
CONFIG_FILE = "config/config.yaml"
OVERRIDES_FILE = "config/overrides.yaml"
# A process re-reads the overrides file at most this often (the mock's MOCK_NVML_OVERRIDES_TTL default, 1 s),
# with a margin: a guarded call within it still sees the former file.
OVERRIDES_TTL_SECONDS = 1.5
DEFAULT_GPU_PROFILE = "h100"  # HGX H100: the machine of sample-repo's inference pool and KGWE's HGX-H100
FailureMode = Literal["ecc_uncorrectable", "lost", "fallen_off_bus"]
FAILURE_MODES: tuple[str, ...] = get_args(FailureMode)
_MAX_PROFILE_BYTES = 1 << 20
_MAX_GPUS = 8  # the mock's MaxDevices


@dataclass(frozen=True)
class ProfileGpu:
    index: int
    uuid: str


def install_driver_root(binaries: NvidiaBinaries, profile: str, root: Path = DRIVER_ROOT) -> None:
    """Lay the library and the profile out under `root` (replacing what a former run left)."""
    source = binaries.profile(profile)
    if root.exists():
        shutil.rmtree(root)
    libdir = root / LIBRARY_DIR
    libdir.mkdir(parents=True)
    shutil.copy2(binaries.library, libdir / binaries.library.name)
    (libdir / NVML_LIBRARY).symlink_to(binaries.library.name)
    (root / CONFIG_FILE).parent.mkdir(parents=True)
    shutil.copy2(source, root / CONFIG_FILE)


def _profile(root: Path) -> dict[str, Any]:
    path = root / CONFIG_FILE
    try:
        if path.stat().st_size > _MAX_PROFILE_BYTES:
            raise KgweError(f"{path}: larger than {_MAX_PROFILE_BYTES} bytes")
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise KgweError(f"cannot read the GPU profile {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise KgweError(f"{path}: not a mock NVML profile")
    return doc


def profile_gpus(root: Path = DRIVER_ROOT) -> list[ProfileGpu]:
    """The GPUs the installed profile gives NVML: index and UUID (what NVIDIA's plugin advertises)."""
    doc = _profile(root)
    devices = [d for d in doc.get("devices") or [] if isinstance(d, dict)]
    count = int((doc.get("system") or {}).get("num_devices") or len(devices) or _MAX_GPUS)
    by_index = {int(d["index"]): str(d.get("uuid", "")) for d in devices if "index" in d}
    return [ProfileGpu(i, by_index.get(i, "")) for i in range(min(count, _MAX_GPUS))]


def inject_failure(
    gpu: int, mode: FailureMode, xid: int | None = None, root: Path = DRIVER_ROOT, occurrence: int = 0
) -> dict[str, Any]:
    """Write a failure of GPU `gpu` into the overrides file every process using the library re-reads (other
    GPUs' injected failures stay); returns the document written. The mock trips the GPU on its next guarded
    call in each process: no trigger, so the very first one. A new `occurrence` (> 0) of the same failure
    makes it happen again: the mock keeps a device's tripped state, and its Xid delivered, only while the
    failure block stays the same, so the block then carries the occurrence as its `seed` (which only seeds
    `probability` rolls, and there are none)."""
    if mode not in FAILURE_MODES:
        raise KgweError(f"unknown failure mode {mode!r}; the mock knows {', '.join(FAILURE_MODES)}")
    gpus = profile_gpus(root)
    if not 0 <= gpu < len(gpus):
        raise KgweError(f"no GPU {gpu} on this node: the profile has GPUs 0..{len(gpus) - 1}")
    if xid is not None and not 0 < xid < 1 << 16:
        raise KgweError(f"Xid {xid} is not an Xid code (1..65535)")
    failure: dict[str, Any] = {"mode": mode}
    if xid is not None:
        failure["xid"] = {"code": xid}
    if occurrence:
        failure["seed"] = occurrence
    doc = _read_overrides(root)
    doc.setdefault("devices", {})[str(gpu)] = {"failure": failure}
    _write_overrides(root, doc)
    return doc


def injected_failures(root: Path = DRIVER_ROOT) -> dict[int, Mapping[str, Any]]:
    """GPU index -> the failure block the overrides file gives it."""
    devices = _read_overrides(root).get("devices") or {}
    return {
        int(k): v.get("failure", {}) for k, v in devices.items() if str(k).isdigit() and isinstance(v, dict)
    }


def clear_failures(root: Path = DRIVER_ROOT) -> None:
    """Remove the overrides file (a process whose GPU already tripped into `lost` keeps it lost only while
    the override stays; the mock puts a cleared device back to healthy)."""
    (root / OVERRIDES_FILE).unlink(missing_ok=True)


def _read_overrides(root: Path) -> dict[str, Any]:
    path = root / OVERRIDES_FILE
    if not path.is_file():
        return {"version": 1}
    doc = yaml.safe_load(path.read_text()[:_MAX_PROFILE_BYTES])
    return doc if isinstance(doc, dict) else {"version": 1}


def _write_overrides(root: Path, doc: Mapping[str, Any]) -> None:
    """Atomically (the mock may read it at any moment), newer mtime every time (its change check)."""
    path = root / OVERRIDES_FILE
    partial = path.with_suffix(".partial")
    partial.write_text(yaml.safe_dump(dict(doc), sort_keys=True))
    partial.replace(path)
