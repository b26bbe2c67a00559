"""`kgwe agent`: the real no-driver path, replayed topologies, and the Node labels/annotations it wants."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from kgwe import vocab
from kgwe.agent import node_state
from kgwe.cli import main
from kgwe.topology import annotation, known
from kgwe.topology.parser import parse_known_file


def test_no_driver_says_so_in_one_line_and_exits_non_zero():
    """This machine has no NVIDIA driver: the real pynvml fails to load libnvidia-ml."""
    proc = subprocess.run(
        [sys.executable, "-m", "kgwe.cli", "agent", "--once", "--print"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no NVIDIA driver" in lines[0], proc.stderr


@pytest.mark.parametrize("name", known.names())
def test_fake_nvml_print_matches_the_source_matrix(name, capsys, tmp_path):
    # not the host's socket: a real kubelet of the local cluster may be starting or stopping beside this test
    absent = str(tmp_path / "kubelet.sock")
    argv = ["agent", "--once", "--print", "--json", "--fake-nvml", name, "--pod-resources-socket", absent]
    assert main(argv) == 0
    out = orjson.loads(capsys.readouterr().out)
    source = parse_known_file(known.source_text(name)).topo
    assert [tuple(r) for r in out["matrix"]] == list(source.cells)
    assert [g["cpu_affinity"] for g in out["gpus"]] == list(source.cpu_affinity)
    assert [g["numa_node"] for g in out["gpus"]] == list(source.numa_affinity)
    assert out["known_topology"] == name
    assert out["warnings"] == []


def test_text_output_prints_the_matrix(capsys, tmp_path):
    absent = str(tmp_path / "kubelet.sock")  # not the host's (see above)
    argv = ["agent", "--once", "--print", "--fake-nvml", "dgx-1-v100", "--pod-resources-socket", absent]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "GPU0\t X \tNV1\tNV1\tNV2\tNV2\tSYS\tSYS\tSYS\t0-19,40-59\t0" in out
    assert "known topology: DGX-1-V100" in out


def test_unknown_fake_topology_and_missing_node_name_are_clear_errors(capsys):
    assert main(["agent", "--once", "--print", "--fake-nvml", "DGX-9"]) == 1
    assert "unknown topology 'DGX-9'" in capsys.readouterr().err
    assert main(["agent", "--once", "--fake-nvml", "DGX-A100", "--node-name", ""]) == 1
    assert "no Node to publish on" in capsys.readouterr().err


def test_labels_and_patch_only_on_change():
    topo = known.load("HGX-H100")
    labels = node_state.desired_labels(topo)
    assert labels["kgwe.nvidia.io/topology"] == "HGX-H100"
    assert labels["kgwe.nvidia.io/nvswitch"] == "true" and labels["kgwe.nvidia.io/ring-gbps"] == "450"
    anns = node_state.desired_annotations(topo, {3: "ml/a", 0: "ml/b"})
    assert annotation.decode(anns[annotation.ANNOTATION_KEY]) == topo
    assert orjson.loads(anns[vocab.GPU_PODS_ANNOTATION]) == {"0": "ml/b", "3": "ml/a"}
    first = node_state.node_patch({"other": "x"}, None, labels, anns)
    assert first["metadata"]["annotations"] == anns
    assert "other" not in first["metadata"]["labels"]
    current_labels = {**{k: v for k, v in labels.items() if v is not None}, "other": "x"}
    assert node_state.node_patch(current_labels, anns, labels, anns) is None
    l40s = node_state.desired_labels(known.load("L40S-8-PCIE"))
    assert l40s["kgwe.nvidia.io/nvlink"] == "false"
    stale = node_state.node_patch(current_labels, anns, {**l40s, "kgwe.nvidia.io/topology": None}, anns)
    assert stale["metadata"]["labels"]["kgwe.nvidia.io/topology"] is None  # removes the stale label
    assert "annotations" not in stale["metadata"]
