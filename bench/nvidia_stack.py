"""Benchmark of KGWE beside NVIDIA's own GPU stack on the local GPU node, as a person runs it:
`kgwe cluster up --gpu-profile h100`, the seed `helm install`, a policy repository over https.

    .venv/bin/python bench/nvidia_stack.py

Needs root, the built binaries (`make bins`: the cluster's, the node's, NVIDIA's) and the image (built when
missing, as the tests build it). Figures:

- gpu_node_ready_seconds: `kgwe cluster up --gpu-profile h100` until it returns, i.e. until NVIDIA's device
  plugin advertises the profile's 8 GPUs and GFD's labels are on the node (nvidia_stack_seconds: the part
  after the node was Ready: NVIDIA's DaemonSets starting on it);
- sharing_switch_seconds: a GPUSharingStrategy (time-slicing x4) pushed to the policy repository until the
  real node's allocatable `nvidia.com/gpu` changed (KGWE's sync, render and rollout, NVIDIA's config-manager
  and plugin restart, the kubelet);
- health_withdrawn_seconds: an uncorrectable ECC error with Xid 48 injected into GPU 3 (`kgwe cluster
  fail-gpu`, which restarts NVIDIA's plugin in place until it withdraws GPU 3) until both have let it go:
  the extender no longer chooses it (the agent's health annotation names it: what the extender's watch
  reads; health_marked_seconds) and NVIDIA's plugin withdrew it (the node's allocatable `nvidia.com/gpu` is
  7; plugin_withdrawn_seconds); then an 8-GPU pod is checked to be refused;
- agent_discovery_ms: one discovery of the agent through NVIDIA's mock library (median of 20, in a process
  of its own loading the library from the node's driver root).

Last line, one JSON object.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.harness
from kubernetes import client

from kgwe.localcluster.mocknvml import DRIVER_ROOT, LIBRARY_DIR
from kgwe.localcluster.realnode import NODE_NAME
from kgwe.topology import health
from kgwe.vocab import GPU_RESOURCE
from tests.harness.image import build_image
from tests.harness.kgwe_on_gpu_node import KgweOnGpuNode, sharing_strategy
from tests.harness.pods import devices_pod
from tests.harness.realnode import busybox_image

KGWE = [sys.executable, "-m", "kgwe.cli"]
DISCOVERY = """
import time, statistics, pynvml
from kgwe.topology import discovery
runs = []
for _ in range(20):
    t = time.perf_counter(); discovery.discover(pynvml, name="n"); runs.append(time.perf_counter() - t)
print(statistics.median(runs) * 1000)
"""


def _allocatable(core: client.CoreV1Api) -> str | None:
    return (core.read_node(NODE_NAME).status.allocatable or {}).get(GPU_RESOURCE)


def _until(what: str, check, timeout: float = 600.0, poll: float = 0.1) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"{what}: not within {timeout:.0f} s")
        time.sleep(poll)
    return time.monotonic() - started


def cluster_up(archives: list[Path], directory: Path) -> tuple[float, float, Path]:
    images = [x for a in archives for x in ("--image", str(a))]
    started = time.monotonic()
    proc = subprocess.run(
        [*KGWE, "cluster", "up", "--gpu-profile", "h100", *images, "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"kgwe cluster up failed: {proc.stderr.strip()[-3000:]}")
    log = (directory / "logs" / "cluster.log").read_text()
    stack = next(
        float(line.rsplit("(", 1)[1].rstrip("s)"))
        for line in log.splitlines()
        if "from NVIDIA's device plugin, labelled by GFD" in line
    )
    return seconds, stack, Path(proc.stdout.strip().splitlines()[-1].split("=", 1)[1])


def discovery_ms() -> float:
    env = {**os.environ, "LD_LIBRARY_PATH": str(DRIVER_ROOT / LIBRARY_DIR)}
    out = subprocess.run(
        [sys.executable, "-c", DISCOVERY], env=env, capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        raise SystemExit(f"discovery through the mock failed: {out.stderr[-2000:]}")
    return float(out.stdout.strip())


def main() -> None:
    image, busybox = build_image(), busybox_image()
    with tempfile.TemporaryDirectory(prefix="kgwe-bench-nvidia-") as tmp:
        try:
            up_seconds, stack_seconds, kubeconfig = cluster_up(
                [image.archive, busybox.archive], Path(tmp) / "c"
            )
            print(f"kgwe cluster up --gpu-profile h100: {up_seconds:.1f} s (NVIDIA's: {stack_seconds:.1f} s)")
            agent_ms = discovery_ms()
            print(f"one discovery through the mock NVML: {agent_ms:.1f} ms")
            with KgweOnGpuNode(kubeconfig, Path(tmp), ("agent.intervalSeconds=2",)) as kgwe:
                core = client.CoreV1Api(kgwe.api)
                print(f"helm install --wait: {kgwe.install_seconds:.1f} s")
                kgwe.commit({"sharing/ts4.yaml": sharing_strategy("ts4", 4, NODE_NAME)}, "share")
                switch = _until("the real node's allocatable changed", lambda: _allocatable(core) != "8")
                print(f"sharing commit -> allocatable {_allocatable(core)}: {switch:.1f} s")
                kgwe.commit({"sharing/ts4.yaml": None}, "unshare")
                _until("back to 8 whole GPUs", lambda: _allocatable(core) == "8")
                started = time.monotonic()
                fail = subprocess.Popen(
                    [*KGWE, "cluster", "fail-gpu", "3", "--mode", "ecc_uncorrectable", "--xid", "48"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )

                def marked() -> bool:
                    raw = core.read_node(NODE_NAME).metadata.annotations.get(health.ANNOTATION_KEY)
                    return 3 in (health.decode(raw) if raw else {})

                seen: dict[str, float] = {}  # which let GPU 3 go first, and when

                def both() -> bool:
                    for what, check in (("marked", marked), ("plugin", lambda: _allocatable(core) == "7")):
                        if what not in seen and check():
                            seen[what] = time.monotonic() - started
                    return len(seen) == 2

                _until("GPU 3 marked by the agent and withdrawn by NVIDIA's plugin", both, 300)
                marked_seconds, plugin_seconds = seen["marked"], seen["plugin"]
                withdrawn_seconds = max(marked_seconds, plugin_seconds)
                _, err = fail.communicate(timeout=300)
                if fail.returncode:
                    raise SystemExit(f"kgwe cluster fail-gpu failed: {err}")
                print(err.strip())
                print(
                    f"failure injected -> GPU 3 marked (the extender's input): {marked_seconds:.1f} s, "
                    f"withdrawn by NVIDIA's plugin (allocatable 7): {plugin_seconds:.1f} s"
                )
                ns = kgwe.opted_in_namespace(f"bench-{secrets.token_hex(3)}")
                # GPU 3 is not handed out: an 8-GPU pod is refused (NVIDIA's plugin offers 7 GPUs; the
                # extender counts GPU 3 taken)
                core.create_namespaced_pod(ns, devices_pod("eight", 8, busybox.reference, NODE_NAME))
                selector = "involvedObject.name=eight,reason=FailedScheduling"
                _until(
                    "the 8-GPU pod refused",
                    lambda: core.list_namespaced_event(ns, field_selector=selector).items,
                    300,
                )
                if core.read_namespaced_pod("eight", ns).spec.node_name:
                    raise SystemExit("an 8-GPU pod was placed while GPU 3 was marked unhealthy")
                core.delete_namespace(ns)
        finally:
            subprocess.run([*KGWE, "cluster", "down"], capture_output=True, timeout=600)
    print(
        json.dumps(
            {
                "gpu_node_ready_seconds": round(up_seconds, 1),
                "nvidia_stack_seconds": round(stack_seconds, 1),
                "sharing_switch_seconds": round(switch, 1),
                "health_withdrawn_seconds": round(withdrawn_seconds, 1),
                "health_marked_seconds": round(marked_seconds, 1),
                "plugin_withdrawn_seconds": round(plugin_seconds, 1),
                "agent_discovery_ms": round(agent_ms, 1),
                "load_average": round(os.getloadavg()[0], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
