"""Benchmark of KGWE's install as a person runs it: `kgwe cluster up` with the KGWE image, the README's
`helm install ... --wait`, the first GPU pod placed, and what an upgrade of KGWE alone pulls.

    .venv/bin/python bench/install.py

Needs root and the built binaries (`make cluster-bins tool-bins`; node binaries are built by `kgwe cluster
up` itself on first use); the image comes from the cache the tests use (built when missing). Runs, in
order: `kgwe cluster up --image ARCHIVE` (warm: binaries built), the seed `helm install --wait`, a GPU pod in
an opted-in namespace until it is bound, then `helm uninstall` and `kgwe cluster down`. Last line, one JSON
object: cluster_up_seconds, helm_install_ready_seconds, first_gpu_pod_placed_seconds, app_layer_mb (the
compressed KGWE layer: what an upgrade that changes only KGWE pulls), image_mb (all compressed layers: what a
node pulls the first time), image_unpacked_mb, layers.
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
from kubernetes import client, config

from kgwe.vocab import SCHEDULER_NAME
from tests.harness.chart import CHART_DIR, helm
from tests.harness.image import build_image, uncompressed_size_bytes

KGWE = [sys.executable, "-m", "kgwe.cli"]
SEED = (
    "install", "kgwe", str(CHART_DIR), "--namespace", "kgwe-system", "--create-namespace",
    "--set", "scheduler.enabled=true", "--set", "migController.enabled=true",
)  # fmt: skip


def layer_sizes_mb(archive: Path) -> list[float]:
    """The compressed size of each layer of the image, in 10^6 bytes."""
    import tarfile

    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        manifest = "blobs/" + index["manifests"][0]["digest"].replace(":", "/")
        layers = json.load(tar.extractfile(manifest))["layers"]  # type: ignore[arg-type]
    return [round(layer["size"] / 1e6, 2) for layer in layers]


def cluster_up(archive: Path, directory: Path) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(
        [*KGWE, "cluster", "up", "--image", str(archive), "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"kgwe cluster up failed: {proc.stderr.strip()[-2000:]}")
    last = proc.stdout.strip().splitlines()[-1]
    if not last.startswith("export KUBECONFIG="):
        raise SystemExit(f"kgwe cluster up: unexpected last line {last!r}")
    return seconds, last.split("=", 1)[1]


def first_gpu_pod(api: client.ApiClient) -> float:
    """Seconds from creating a GPU pod in an opted-in namespace to its binding."""
    core = client.CoreV1Api(api)
    namespace = f"bench-{secrets.token_hex(3)}"
    core.create_namespace(
        {"metadata": {"name": namespace, "labels": {"kgwe.nvidia.io/scheduling": "enabled"}}}
    )
    pod = {
        "metadata": {"name": "first"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        },
    }
    started = time.monotonic()
    core.create_namespaced_pod(namespace, pod)
    while not core.read_namespaced_pod("first", namespace).spec.node_name:
        if time.monotonic() - started > 300:
            raise SystemExit("the first GPU pod was not placed in 300 s")
        time.sleep(0.1)
    seconds = time.monotonic() - started
    scheduler = core.read_namespaced_pod("first", namespace).spec.scheduler_name
    if scheduler != SCHEDULER_NAME:  # the webhook routes GPU pods of opted-in namespaces to KGWE's
        raise SystemExit(f"the first GPU pod was placed by {scheduler}, not {SCHEDULER_NAME}")
    return seconds


def main() -> None:
    image = build_image()
    layers = layer_sizes_mb(image.archive)
    print(f"{image.reference}: layers {layers} MB compressed")
    with tempfile.TemporaryDirectory(prefix="kgwe-bench-install-") as tmp:
        up_seconds, kubeconfig = cluster_up(image.archive, Path(tmp) / "cluster")
        print(f"kgwe cluster up: {up_seconds:.1f} s")
        env = {
            "KUBECONFIG": kubeconfig,
            **{f"HELM_{k}_HOME": f"{tmp}/helm-{k}" for k in ("CACHE", "CONFIG", "DATA")},
        }
        try:
            started = time.monotonic()
            helm(*SEED, "--wait", "--timeout", "10m", env=env)
            install_seconds = time.monotonic() - started
            print(f"helm install --wait: {install_seconds:.1f} s")
            placed = first_gpu_pod(config.new_client_from_config(config_file=kubeconfig))
            print(f"first GPU pod placed: {placed:.1f} s")
            helm("uninstall", "kgwe", "--namespace", "kgwe-system", "--wait", env=env)
        finally:
            subprocess.run([*KGWE, "cluster", "down"], capture_output=True, timeout=600)
    print(
        json.dumps(
            {
                "cluster_up_seconds": round(up_seconds, 1),
                "helm_install_ready_seconds": round(install_seconds, 1),
                "first_gpu_pod_placed_seconds": round(placed, 2),
                "app_layer_mb": layers[-1],
                "image_mb": round(sum(layers), 1),
                "image_unpacked_mb": round(uncompressed_size_bytes(image.archive) / 1e6, 1),
                "layers": len(layers),
                "load_average": round(os.getloadavg()[0], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
