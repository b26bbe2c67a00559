"""The built wheel carries what an installed `kgwe` needs outside the Python package: templates, schemas,
sample-repo, deploy/ and the recipe for the demo's Kubernetes binaries (hack/)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Run from an unpacked wheel (pure Python: unpacking is installing), far from the checkout.
_PROBE = """
import sys
from pathlib import Path
import kgwe.resources as resources
from kgwe.localcluster import controlplane
site = Path(sys.argv[1])
assert Path(resources.__file__).is_relative_to(site), resources.__file__
assert resources.hack_dir().is_relative_to(site), resources.hack_dir()
assert controlplane.BUILD_SCRIPT.is_file(), controlplane.BUILD_SCRIPT
examples = resources.workload_examples_dir()
assert examples.is_relative_to(site) and (examples / "inference-mig.yaml").is_file(), examples
print("VERSION=" + controlplane.pinned_kubernetes_version())
from kgwe.cli import main
sys.exit(main(["validate", str(resources.sample_repo_dir())]))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(out)],
        check=True,
        timeout=600,
    )
    return next(out.glob("kgwe-*.whl"))


def test_wheel_holds_the_cluster_binaries_recipe(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in (
        "hack/cluster-bins.sh",
        "hack/k8s/go.mod",
        "hack/k8s/go.sum",
        "hack/node-bins.sh",  # and the real node's: kgwe cluster up
        "hack/containerd/go.mod",
        "hack/cni/go.mod",
        "hack/coredns/go.mod",
        "hack/coredns/main.go",
        "sample-repo/pricing/catalog.yaml",
        "docs/examples/gpuworkloads/kgwe-readme-llm-training.yaml",  # kgwe demo applies it
        "docs/examples/gpuworkloads/kgwe-prd-llm-training-job.yaml",  # and this one, with
        "sample-repo/runtimes/torch-distributed.yaml",  # this runtime
    ):
        assert f"kgwe/_data/{path}" in names
    # the product checks pod templates offline: the schema ships in the package
    assert "kgwe/policy/pod_template_spec.json" in names


def test_installed_wheel_finds_the_recipe_and_its_data(wheel: Path, tmp_path: Path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(site)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    pinned = re.search(r"k8s\.io/kubernetes\s+(v\S+)", (REPO / "hack/k8s/go.mod").read_text())
    assert pinned is not None
    assert f"VERSION={pinned.group(1)}" in out.stdout
    assert ": valid" in out.stdout
