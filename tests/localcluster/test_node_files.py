"""What the real node writes without running anything: OCI image archives, its TOML, the host snapshot, the
kwok GPU nodes made from a GPUInventory, and the KGWE image reference the chart uses."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

import kgwe
from kgwe.errors import KgweError
from kgwe.localcluster import gpunodes, hoststate
from kgwe.localcluster.cluster import chart_image_reference
from kgwe.localcluster.ociimage import (
    IMAGE_NAME_ANNOTATION,
    ImageFile,
    ImageSpec,
    archive_reference,
    write_oci_archive,
)
from kgwe.localcluster.realnode import toml_document
from kgwe.policy.inventory import GPUDeviceState, InventoryNode


def _blob(tar: tarfile.TarFile, digest: str) -> bytes:
    member = tar.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
    assert member is not None
    return member.read()


def test_an_oci_archive_is_a_valid_layout_with_the_named_image(tmp_path: Path) -> None:
    program = tmp_path / "prog"
    program.write_bytes(b"#!/bin/sh\necho hi\n")
    spec = ImageSpec(
        "registry.example.com/tools/prog:1.2.3",
        [ImageFile("/usr/local/bin/prog", program)],
        ["/usr/local/bin/prog"],
        user="65532:65532",
        directories={"/tmp": 0o1777},
        symlinks={"/bin/p": "/usr/local/bin/prog"},
        labels={"org.opencontainers.image.title": "prog"},
    )
    digest = write_oci_archive(spec, tmp_path / "prog.oci.tar")
    assert write_oci_archive(spec, tmp_path / "again.oci.tar") == digest  # same inputs, same image
    assert archive_reference(tmp_path / "prog.oci.tar") == spec.reference
    with tarfile.open(tmp_path / "prog.oci.tar") as tar:
        assert json.loads(_blob_named(tar, "oci-layout")) == {"imageLayoutVersion": "1.0.0"}
        index = json.loads(_blob_named(tar, "index.json"))
        entry = index["manifests"][0]
        assert entry["digest"] == digest and entry["annotations"][IMAGE_NAME_ANNOTATION] == spec.reference
        manifest_bytes = _blob(tar, digest)
        assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == digest == entry["digest"]
        manifest = json.loads(manifest_bytes)
        config = json.loads(_blob(tar, manifest["config"]["digest"]))
        assert config["config"]["User"] == "65532:65532"
        assert config["config"]["Entrypoint"] == ["/usr/local/bin/prog"]
        assert config["config"]["Labels"] == {"org.opencontainers.image.title": "prog"}
        layer_bytes = _blob(tar, manifest["layers"][0]["digest"])
        assert len(layer_bytes) == manifest["layers"][0]["size"]
        assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer_bytes)) as layer:
        members = {m.name.rstrip("/"): m for m in layer.getmembers()}
    assert [n for n in members if members[n].isdir()] == ["bin", "tmp", "usr", "usr/local", "usr/local/bin"]
    assert members["tmp"].mode == 0o1777
    assert members["usr/local/bin/prog"].mode == 0o755 and members["usr/local/bin/prog"].uid == 0
    assert members["bin/p"].issym() and members["bin/p"].linkname == "/usr/local/bin/prog"


def _blob_named(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.extractfile(name)
    assert member is not None
    return member.read()


def test_an_archive_that_names_only_a_tag_names_no_reference(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    layout.mkdir()
    (layout / "index.json").write_text(
        json.dumps(
            {
                "manifests": [
                    {"digest": "sha256:00", "annotations": {"org.opencontainers.image.ref.name": "1.0"}}
                ]
            }
        )
    )
    with tarfile.open(tmp_path / "tag-only.tar", "w") as tar:
        tar.add(layout / "index.json", "index.json")
    assert archive_reference(tmp_path / "tag-only.tar") is None
    (tmp_path / "not-an-image.tar").write_bytes(b"plain text")
    with pytest.raises(KgweError, match="not an OCI image archive"):
        archive_reference(tmp_path / "not-an-image.tar")


def test_toml_document_reads_back_as_the_same_tables() -> None:
    table = {
        "version": 3,
        "imports": [],
        "grpc": {"address": "/run/x/containerd.sock"},
        "plugins": {
            "io.containerd.cri.v1.runtime": {
                "restrict_oom_score_adj": True,
                "cni": {"bin_dirs": ["/a b", 'quo"te'], "max_conf_num": 1},
            }
        },
    }
    assert tomllib.loads(toml_document(table)) == table


def test_the_host_snapshot_survives_its_json() -> None:
    snap = hoststate.take_snapshot()
    assert "net/ipv4/ip_forward" in snap.sysctls
    assert set(snap.fixed) == {str(p) for p in hoststate.FIXED_PATHS}
    assert hoststate.HostSnapshot.from_json(snap.to_json()) == snap


def test_inventory_nodes_become_tainted_gpu_nodes_with_their_mig_layout() -> None:
    mig = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    node = InventoryNode(
        name="h100-a",
        labels={"kgwe.nvidia.io/pool": "inference", "nvidia.com/gpu.product": "ignored"},
        gpus=8,
        product="NVIDIA-H100-80GB-HBM3",
        topology="DGX-H100",
        mig_config="all-balanced",
        devices=[GPUDeviceState(index=i, mig=mig) for i in range(8)],
    )
    manifest = gpunodes.inventory_node_manifest(node, taints=[gpunodes.GPU_NODE_TAINT])
    labels, allocatable = manifest["metadata"]["labels"], manifest["status"]["allocatable"]
    assert labels["kgwe.nvidia.io/pool"] == "inference"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"  # GFD's, not the inventory's label
    assert labels["nvidia.com/mig.config"] == "all-balanced"
    assert allocatable["nvidia.com/mig-1g.10gb"] == "16" and allocatable["nvidia.com/gpu"] == "0"
    assert manifest["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    whole = gpunodes.inventory_node_manifest(node, with_mig_layout=False)
    assert whole["status"]["allocatable"]["nvidia.com/gpu"] == "8" and "taints" not in whole["spec"]


def test_an_inventory_node_without_a_simulated_machine_is_refused() -> None:
    node = InventoryNode(name="b200", gpus=8, product="NVIDIA-B200", topology="HGX-B200")
    with pytest.raises(KgweError, match="no simulated GPU machine for topology 'HGX-B200'"):
        gpunodes.inventory_node_manifest(node)


def test_the_chart_runs_the_image_of_this_version_by_default() -> None:
    assert chart_image_reference() == f"ghcr.io/kgwe/kgwe:{kgwe.__version__}"
