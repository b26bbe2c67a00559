"""No drift between the labels KGWE's kwok GPU nodes carry and what NVIDIA's GPU Feature Discovery writes for
the same product: GFD v0.20.0 (built from NVIDIA's source) labels NVIDIA's mock NVML machine once, with the
device-plugin config KGWE renders for unshared nodes, and every label it writes must be on the kwok node of
that product, in the same format; the values that follow from the product must be equal.

What may differ, named: the values that describe one box rather than the model (the driver and CUDA
versions, the machine's DMI name), the GPU memory (the mock reports nominal GiB, a real H100 81559 MiB and a
real L40S 46068 MiB, which the kwok nodes carry), the GPU mode (`unknown` here: GFD reads the PCI class from
sysfs, which has no device for the mock's GPUs), and the NVLink clique the mock's fabric gives its H100
(`gpu.clique`, not modelled on kwok nodes), and MIG capability where the mock claims it for a GPU that has
none (its L40S). Labels the kwok nodes carry that GFD never writes are the GPU
Operator's own (`gpu.present`, `gpu.deploy.*`) and the MIG manager's.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from kgwe.localcluster import gpunodes, mocknvml
from kgwe.render.sharing import DEFAULT_CONFIG_KEY, device_plugin_configs
from kgwe.vocab import GPU_DEPLOY_LABEL_PREFIX, GPU_PRESENT_LABEL, MIG_CONFIG_LABEL, MIG_STATE_LABEL

# GFD's labels whose values describe the box, not the product.
PER_BOX = {
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.mode",
    "nvidia.com/gpu.machine",
    *(f"nvidia.com/cuda.driver-version.{p}" for p in ("full", "major", "minor", "revision")),
    *(f"nvidia.com/cuda.driver.{p}" for p in ("major", "minor", "rev")),
    *(f"nvidia.com/cuda.runtime-version.{p}" for p in ("full", "major", "minor")),
    *(f"nvidia.com/cuda.runtime.{p}" for p in ("major", "minor")),
}
NOT_ON_KWOK = {"nvidia.com/gpu.clique"}
# Where NVIDIA's mock is not the hardware: it reports every GPU MIG-capable (a real L40S is not).
MOCK_LIMITS = {"l40s": {"nvidia.com/mig.capable"}}
# The format of a label value: what its characters are.
_SHAPES = (
    ("integer", re.compile(r"^\d+$")),
    ("boolean", re.compile(r"^(true|false)$")),
    ("version", re.compile(r"^\d+(\.\d+)+$")),
    ("word", re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")),
)


def _shape(value: str) -> str:
    return next(name for name, pattern in _SHAPES if pattern.match(value))


def gfd_labels(binaries, profile: str, tmp_path: Path) -> dict[str, str]:
    """What GFD writes for the mock NVML profile, once, with KGWE's default device-plugin config."""
    root = tmp_path / "driver"
    mocknvml.install_driver_root(binaries, profile, root)
    config = tmp_path / "config.yaml"
    config.write_text(device_plugin_configs(())[DEFAULT_CONFIG_KEY])
    out = tmp_path / "gfd"
    env = {**os.environ, "LD_LIBRARY_PATH": str(root / mocknvml.LIBRARY_DIR)}
    done = subprocess.run(
        [
            str(binaries.command("gpu-feature-discovery")),
            "--oneshot",
            "--no-timestamp",
            "--use-node-feature-api=false",
            f"--output-file={out}",
            f"--config-file={config}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)


@pytest.mark.parametrize(("profile", "machine"), [("h100", "DGX-H100"), ("l40s", "L40S-8-PCIE")])
def test_kwok_nodes_carry_what_gfd_writes(nvidia_binaries, tmp_path, profile, machine):
    gfd = gfd_labels(nvidia_binaries, profile, tmp_path)
    kwok = gpunodes.node_manifest("n", gpunodes.machine(machine))["metadata"]["labels"]
    missing = set(gfd) - set(kwok) - NOT_ON_KWOK
    assert not missing, f"GFD writes labels the kwok {machine} node lacks: {sorted(missing)}"
    for key in set(gfd) & set(kwok):
        assert _shape(gfd[key]) == _shape(kwok[key]), (key, gfd[key], kwok[key])
        if key not in PER_BOX | MOCK_LIMITS.get(profile, set()):
            assert gfd[key] == kwok[key], (key, gfd[key], kwok[key])
    operator_only = {k for k in set(kwok) - set(gfd) if k.startswith("nvidia.com/")}
    allowed = {GPU_PRESENT_LABEL, MIG_CONFIG_LABEL, MIG_STATE_LABEL}
    assert {k for k in operator_only if not k.startswith(GPU_DEPLOY_LABEL_PREFIX)} <= allowed, operator_only
    assert gfd["nvidia.com/gpu.mode"] == "unknown" and kwok["nvidia.com/gpu.mode"] == "compute"
    if profile == "l40s":  # the mock's limit, named: should it learn, this says so
        assert gfd["nvidia.com/mig.capable"] == "true" and kwok["nvidia.com/mig.capable"] == "false"
    # KGWE's default config asks for the mixed MIG strategy: GFD says so on every GPU node
    assert gfd["nvidia.com/mig.strategy"] == kwok["nvidia.com/mig.strategy"] == "mixed"
    assert yaml.safe_load(device_plugin_configs(())[DEFAULT_CONFIG_KEY])["flags"]["migStrategy"] == "mixed"
