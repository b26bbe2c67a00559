"""GPUSharingStrategy: every invalid setting is an error with file:line and field path; what it renders is a
device-plugin config the plugin's own rules accept, and the node labels that select it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from kgwe.localcluster.deviceplugin import (
    InvalidDevicePluginConfig,
    advertised,
    parse_config,
)
from kgwe.policy import load_repository
from kgwe.render.render import render
from kgwe.render.sharing import config_key

INVENTORY = """
apiVersion: kgwe.nvidia.io/v1
kind: GPUInventory
metadata: {name: inv}
spec:
  nodes:
    - {name: l1, labels: {pool: notebooks}, gpus: 8, product: NVIDIA-L40S}
    - {name: l2, labels: {pool: notebooks}, gpus: 8, product: NVIDIA-L40S}
    - {name: v1, labels: {pool: legacy}, gpus: 8, product: Tesla-V100-SXM2-16GB}
    - {name: h1, labels: {pool: inference}, gpus: 8, product: NVIDIA-H100-80GB-HBM3}
"""


def sharing(name: str, selector: str, mode: str = "TimeSlicing", replicas: int = 4, extra: str = "") -> str:
    return (
        textwrap.dedent(
            f"""
        apiVersion: kgwe.nvidia.io/v1
        kind: GPUSharingStrategy
        metadata: {{name: {name}}}
        spec:
          nodeSelector: {selector}
          mode: {mode}
          replicas: {replicas}
        """
        ).lstrip("\n")
        + extra
    )


MIG_ON_INFERENCE = """apiVersion: kgwe.nvidia.io/v1
kind: MIGStrategy
metadata: {name: inference}
spec:
  nodeSelector: {pool: inference}
  partitionStrategy:
    preferredProfiles: [{1g.10gb: 100%}]
"""


def load(tmp_path: Path, files: dict[str, str]):
    for name, text in {"inv.yaml": INVENTORY.lstrip("\n"), **files}.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return load_repository(tmp_path)


def only_error(ps, fragment: str):
    hits = [d for d in ps.errors if fragment in d.message]
    assert len(hits) == 1, [str(d) for d in ps.diagnostics]
    return hits[0]


def test_valid_strategy_loads_and_mps_defaults_follow_the_plugin(tmp_path):
    ps = load(
        tmp_path,
        {
            "a.yaml": sharing("notebooks", "{pool: notebooks}"),
            "b.yaml": sharing("legacy", "{pool: legacy}", "MPS", 8),
        },
    )
    assert ps.ok, [str(d) for d in ps.diagnostics]
    by_name = {s.name: s for s in ps.sharing_strategies}
    assert not by_name["notebooks"].spec.fails_requests_greater_than_one
    assert by_name["legacy"].spec.fails_requests_greater_than_one  # MPS: the plugin's default is true


@pytest.mark.parametrize("replicas", [1, 0, -3])
def test_fewer_than_two_replicas_is_an_error_with_its_line(tmp_path, replicas):
    d = only_error(load(tmp_path, {"a.yaml": sharing("s", "{pool: notebooks}", replicas=replicas)}), ">= 2")
    assert (d.file, d.line, d.path) == ("a.yaml", 7, "spec.replicas")


def test_mps_client_limit_follows_the_gpus_compute_capability(tmp_path):
    files = {
        "a.yaml": sharing("legacy", "{pool: legacy}", "MPS", 20),  # V100: compute capability 7.0, 16 clients
        "b.yaml": sharing("notebooks", "{pool: notebooks}", "MPS", 48),  # L40S 8.9: 48 is the limit
    }
    d = only_error(load(tmp_path, files), "MPS serves at most")
    assert (d.file, d.path) == ("a.yaml", "spec.replicas") and "16 clients per GPU on V100-16GB" in d.message
    files["b.yaml"] = sharing("notebooks", "{pool: notebooks}", "MPS", 49)
    assert len([e for e in load(tmp_path, files).errors if "MPS serves at most" in e.message]) == 2
    # time-slicing has no such limit
    (tmp_path / "b.yaml").unlink()
    files = {"a.yaml": sharing("legacy", "{pool: legacy}", "TimeSlicing", 20)}
    assert load(tmp_path, files).ok


def test_node_claimed_by_two_sharing_strategies(tmp_path):
    files = {
        "a.yaml": sharing("a", "{pool: notebooks}"),
        "b.yaml": sharing("b", "{pool: notebooks}", replicas=2),
    }
    d = only_error(load(tmp_path, files), 'claims the same nodes as GPUSharingStrategy "a"')
    assert (d.file, d.path) == ("b.yaml", "spec.nodeSelector") and "a.yaml:1" in d.message
    assert "(e.g. node l1)" in d.message


@pytest.mark.parametrize(
    ("mode", "words"), [("MPS", "MPS is not supported on MIG devices"), ("TimeSlicing", "whole GPUs only")]
)
def test_sharing_a_mig_enabled_pool_is_an_error(tmp_path, mode, words):
    files = {"m.yaml": MIG_ON_INFERENCE, "a.yaml": sharing("a", "{pool: inference}", mode)}
    d = only_error(load(tmp_path, files), words)
    assert d.file == "a.yaml" and 'MIGStrategy "inference" (m.yaml:1)' in d.message


def test_both_sharing_sections_in_one_spec_is_an_error_not_a_silent_drop(tmp_path):
    extra = "  timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}\n  mps: {resources: []}\n"
    d = only_error(load(tmp_path, {"a.yaml": sharing("a", "{pool: notebooks}", extra=extra)}), "one way")
    assert d.file == "a.yaml" and "mode: MPS" in d.message


def test_render_gives_one_config_per_strategy_that_the_plugin_rules_accept(tmp_path):
    files = {
        "m.yaml": MIG_ON_INFERENCE,
        "a.yaml": sharing("notebooks", "{pool: notebooks}", extra="  renameByDefault: true\n"),
        "b.yaml": sharing("legacy", "{pool: legacy}", "MPS", 8),
    }
    ps = load(tmp_path, files)
    assert ps.ok, [str(d) for d in ps.diagnostics]
    out = render(ps)
    cm = next(o for o in out.objects if o["metadata"]["name"] == "kgwe-device-plugin-config")
    assert cm["metadata"]["namespace"] == "gpu-operator"
    keys = {s.name: config_key(s) for s in ps.sharing_strategies}
    parsed = {key: parse_config(text) for key, text in cm["data"].items()}
    assert set(parsed) == {"default", keys["notebooks"], keys["legacy"]}
    assert (parsed["default"].strategy, parsed["default"].mig_strategy) == ("none", "mixed")
    ts, mps = parsed[keys["notebooks"]], parsed[keys["legacy"]]
    assert (ts.strategy, ts.mig_strategy, ts.resources[0].replicas) == ("time-slicing", "none", 4)
    assert ts.resources[0].rename == "nvidia.com/gpu.shared"
    assert (mps.strategy, mps.mig_strategy, mps.fail_requests_greater_than_one) == ("mps", "none", True)
    for text in cm["data"].values():  # never both sections: the plugin would silently ignore one
        assert not {"timeSlicing", "mps"} <= set(yaml.safe_load(text).get("sharing") or {})
    assert out.sharing_configs == {"l1": keys["notebooks"], "l2": keys["notebooks"], "v1": keys["legacy"]}
    labels = {o["metadata"]["name"]: o["metadata"]["labels"] for o in out.objects if o["kind"] == "Node"}
    assert labels["l1"]["nvidia.com/device-plugin.config"] == keys["notebooks"]
    assert "nvidia.com/device-plugin.config" not in labels["h1"]  # its MIG label only
    # what the stand-in (and the real plugin + GFD) then advertise on an 8-GPU L40S node
    resources, gfd = advertised(ts, 8, "NVIDIA-L40S")
    assert resources == {"nvidia.com/gpu.shared": 32} and gfd["nvidia.com/gpu.replicas"] == "4"
    resources, gfd = advertised(mps, 8, "Tesla-V100-SXM2-16GB")
    assert (
        resources == {"nvidia.com/gpu": 64} and gfd["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-16GB-SHARED"
    )
    assert gfd["nvidia.com/gpu.sharing-strategy"] == "mps"


def test_nvidia_loader_reads_every_rendered_config_as_rendered(dpconfig, tmp_path):
    files = {
        "m.yaml": MIG_ON_INFERENCE,
        "a.yaml": sharing("notebooks", "{pool: notebooks}", extra="  renameByDefault: true\n"),
        "b.yaml": sharing("legacy", "{pool: legacy}", "MPS", 8),
        "c.yaml": sharing("inference", "{pool: inference-l4}", replicas=2),
    }
    ps = load(tmp_path, files)
    assert ps.ok, [str(d) for d in ps.diagnostics]
    cm = next(o for o in render(ps).objects if o["metadata"]["name"] == "kgwe-device-plugin-config")
    keys = {s.name: config_key(s) for s in ps.sharing_strategies}
    read = {key: dpconfig(text) for key, text in cm["data"].items()}
    default = read["default"]
    assert default["flags"]["migStrategy"] == "mixed"
    assert "mps" not in default["sharing"] and not default["sharing"]["timeSlicing"].get("resources")
    ts = read[keys["notebooks"]]
    assert ts["flags"]["migStrategy"] == "none"
    assert ts["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "rename": "nvidia.com/gpu.shared", "devices": "all", "replicas": 4}
    ]
    assert "mps" not in ts["sharing"]
    mps = read[keys["legacy"]]["sharing"]["mps"]
    assert mps["failRequestsGreaterThanOne"] is True and mps["resources"][0]["replicas"] == 8
    assert read[keys["inference"]]["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 2


def test_nvidia_loader_refuses_what_parse_config_refuses(dpconfig):
    text = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}\n"
    with pytest.raises(InvalidDevicePluginConfig, match="must be >= 2"):
        dpconfig(text)
    with pytest.raises(InvalidDevicePluginConfig, match="must be >= 2"):
        parse_config(text)


def test_config_keys_fit_a_label_and_change_with_the_config(tmp_path):
    name = "notebooks-" + "x" * 80
    ps = load(tmp_path, {"a.yaml": sharing(name, "{pool: notebooks}")})
    key = config_key(ps.sharing_strategies[0])
    assert len(key) <= 63 and key.startswith("kgwe-notebooks-") and key[-1].isalnum()
    (tmp_path / "a.yaml").unlink()
    four = config_key(load(tmp_path, {"b.yaml": sharing("nb", "{pool: notebooks}")}).sharing_strategies[0])
    two = config_key(
        load(tmp_path, {"b.yaml": sharing("nb", "{pool: notebooks}", replicas=2)}).sharing_strategies[0]
    )
    # a changed strategy is a new key: the label changes, so the plugin's config-manager restarts the plugin
    assert four != two and four.startswith("kgwe-nb-") and two.startswith("kgwe-nb-")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v2\n", "unknown version: v2"),
        ("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}\n", "must be >= 2"),
        ("sharing: {timeSlicing: {resources: []}}\n", "no resources specified"),
        ("sharing: {timeSlicing: {resources: [{replicas: 2}]}}\n", "no resource name specified"),
        ("sharing: {timeslicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n", "unknown field"),
        (
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: some}]}}\n",
            "only valid string",
        ),
        (
            "flags: {migStrategy: mixed}\nsharing: {mps: {resources: [{name: gpu, replicas: 2}]}}\n",
            "not supported with MPS",
        ),
        ("flags: {migStrategy: auto}\n", "unknown MIG strategy"),
    ],
)
def test_config_rules_of_the_plugin(text, message):
    with pytest.raises(InvalidDevicePluginConfig, match=message):
        parse_config(text)


def test_both_sections_mps_wins_as_in_the_plugin():
    both = (
        "sharing:\n  timeSlicing: {resources: [{name: gpu, replicas: 4}]}\n"
        "  mps: {resources: [{name: gpu, replicas: 2}]}\n"
    )
    config = parse_config(both)
    assert (config.strategy, config.resources[0].replicas) == ("mps", 2)
