"""What an NVML answers to the calls KGWE makes, as plain JSON: the same function runs on FakeNvml in the
test's process and, in a process of its own (`LD_LIBRARY_PATH=DRIVER_ROOT/usr/lib64 python -m
tests.harness.nvml_answers [ROUNDS]`), on the real nvidia-ml-py loading NVIDIA's mock library from a driver
root (mocknvml.py's layout: the library finds its profile and overrides file beside itself). A process of
its own because nvidia-ml-py loads one library per process, and because the mock keeps its failure state
per process, as the agent's would be.

It runs discovery (what the agent publishes), a few raw calls whose types KGWE decodes, the XID event wait
with nothing pending, and `health_rounds` agent periods of the health probe and tracker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kgwe.agent.health import HealthTracker, Probe
from kgwe.topology import discovery, known
from kgwe.topology.nvml import Nvml


def answers(nvml: Nvml, health_rounds: int = 3) -> dict[str, Any]:
    nvml.nvmlInit()
    found = discovery.discover(nvml, name="node", sys_gbps=16.0)
    topo = found.topology
    gpus = topo.gpus
    out: dict[str, Any] = {
        "discovery": {
            "known": known.identify(topo),
            "driver_version": found.driver_version,
            "indices": [g.index for g in gpus],
            "names": [g.name for g in gpus],
            "uuids": [g.uuid for g in gpus],
            "bus_ids": [g.pci_bus_id for g in gpus],
            "memory_mib": [g.memory_mib for g in gpus],
            "numa": [g.numa_node for g in gpus],
            "cpu_affinity": [g.cpu_affinity for g in gpus],
            "nvswitch_links": [g.nvswitch_links for g in gpus],
            "mig_enabled": [g.mig_enabled for g in gpus],
            "mig_profiles": {str(i): sorted(p) for i, p in found.mig_profiles.items()},
            "matrix": [list(row) for row in topo.matrix()],
            "warnings": list(found.warnings),
        }
    }
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    out["types"] = {
        "count": type(nvml.nvmlDeviceGetCount()).__name__,
        "name": type(nvml.nvmlDeviceGetName(handle)).__name__,
        "uuid": type(nvml.nvmlDeviceGetUUID(handle)).__name__,
        "bus_id": type(nvml.nvmlDeviceGetPciInfo(handle).busId).__name__,
        "driver_version": type(nvml.nvmlSystemGetDriverVersion()).__name__,
        "mig_mode": [int(x) for x in nvml.nvmlDeviceGetMigMode(handle)],
    }
    probe, tracker = Probe(nvml), HealthTracker()
    xids: dict[str, list[int]] = {}
    for _ in range(health_rounds):
        samples = probe.sample()
        tracker.update(samples)
        for sample in samples:
            xids.setdefault(str(sample.index), []).extend(sample.xids)
    out["samples"] = [{**asdict(s), "xids": list(s.xids)} for s in samples]
    out["xids_seen"] = {i: x for i, x in xids.items() if x}
    events = nvml.nvmlEventSetCreate()  # after the probe drained every event: nothing pending
    try:
        nvml.nvmlEventSetWait(events, 0)
        out["empty_wait"] = "returned"
    except nvml.NVMLError as exc:
        out["empty_wait"] = f"{type(exc).__name__}:{getattr(exc, 'value', None)}"

    out["faults"] = {str(i): f.reason for i, f in tracker.faults().items()}
    return out


_REPO = Path(__file__).resolve().parents[2]


def from_mock(
    binaries: Any,
    profile: str,
    root: Path,
    failures: Iterable[tuple[int, str, int | None]] = (),
    health_rounds: int = 3,
) -> dict[str, Any]:
    """answers() from nvidia-ml-py with NVIDIA's mock library, `profile` installed at `root` (a directory of
    the test's), `failures` (gpu, mode, xid) injected through the overrides file first."""
    from kgwe.localcluster import mocknvml

    mocknvml.install_driver_root(binaries, profile, root)
    for gpu, mode, xid in failures:
        mocknvml.inject_failure(gpu, mode, xid, root)  # type: ignore[arg-type]  # a mode of FAILURE_MODES
    env = {**os.environ, "LD_LIBRARY_PATH": str(root / mocknvml.LIBRARY_DIR), "PYTHONPATH": str(_REPO)}
    env.pop("MOCK_NVML_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.harness.nvml_answers", str(health_rounds)],
        env=env,
        cwd=_REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"nvidia-ml-py on the mock library failed: {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str]) -> int:
    import pynvml

    rounds = int(argv[1]) if len(argv) > 1 else 3
    nvml: Nvml = pynvml
    print(json.dumps(answers(nvml, rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
