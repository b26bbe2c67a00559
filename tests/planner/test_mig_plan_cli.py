"""Policy adapter and `kgwe plan-mig` on a small real policy repository written to disk."""

from __future__ import annotations

import json
import textwrap

import pytest

from kgwe.cli import main
from kgwe.errors import KgweError
from kgwe.planner.from_policy import model_of_product, plan_layouts, plan_policy, pool_requests

STRATEGY = """\
apiVersion: kgwe.nvidia.io/v1
kind: MIGStrategy
metadata: {name: inference}
spec:
  nodeSelector: {pool: inference}
  partitionStrategy:
    preferredProfiles:
      - 1g.10gb: 70%
      - 2g.20gb: 20%
      - 3g.40gb: 10%
  rollout: {maxUnavailable: 1, drain: false}
---
apiVersion: kgwe.nvidia.io/v1
kind: MIGStrategy
metadata: {name: whole}
spec:
  nodeSelector: {pool: training}
  migEnabled: false
"""


def _node(name, pool, devices=""):
    text = f"""\
    - name: {name}
      labels: {{pool: {pool}}}
      gpus: 2
      product: NVIDIA-H100-80GB-HBM3
"""
    if devices:
        text += "      devices:\n" + textwrap.indent(devices, " " * 8)
    return text


def _repo(tmp_path, nodes):
    (tmp_path / "mig.yaml").write_text(STRATEGY)
    inventory = "apiVersion: kgwe.nvidia.io/v1\nkind: GPUInventory\nmetadata: {name: lab}\nspec:\n  nodes:\n"
    (tmp_path / "inventory.yaml").write_text(inventory + "".join(nodes))
    return tmp_path


@pytest.fixture
def repo(tmp_path):
    busy = "- {index: 0, mig: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb], inUse: [2g.20gb]}\n"
    return _repo(
        tmp_path,
        [
            _node("h1", "inference", busy),
            _node("h2", "inference"),
            _node("h3", "inference"),
            _node("t1", "training", "- {index: 1, mig: [7g.80gb]}\n"),
        ],
    )


def _policies(path):
    from kgwe.policy import load_repository

    ps = load_repository(path)
    ps.raise_for_errors()
    return ps


def test_pool_requests_carry_layouts_in_use_and_limits(repo):
    ps = _policies(repo)
    assert all(r.limits.max_nodes_changed is None for r in pool_requests(ps.mig_strategies, ps.inventory()))
    reqs = {r.name: r for r in pool_requests(ps.mig_strategies, ps.inventory(), waves=True)}
    inference = reqs["inference"]
    assert inference.shares == pytest.approx({"1g.10gb": 0.7, "2g.20gb": 0.2, "3g.40gb": 0.1})
    assert inference.limits.max_nodes_changed == 1 and not inference.limits.allow_drain
    h1 = next(g for g in inference.gpus if g.node == "h1" and g.index == 0)
    assert h1.model == "H100-80GB" and len(h1.layout) == 4 and [n for n, _ in h1.in_use] == ["2g.20gb"]
    assert not reqs["whole"].mig_enabled


def test_plan_policy_keeps_busy_gpus_and_rolls_one_node(repo):
    ps = _policies(repo)
    result = plan_policy(ps.mig_strategies, ps.inventory(), waves=True)
    inference, whole = result.pools
    assert inference.nodes_changed == 1 and inference.in_use_kept == 1
    assert sorted(result.layouts["h1"][0]) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert result.layouts["t1"] == [None, None] and whole.gpus_changed == 1
    # Without waves the end state is planned (the controller's rollout paces it): more nodes change.
    end_state = plan_policy(ps.mig_strategies, ps.inventory())
    assert end_state.pools[0].nodes_changed > 1 and end_state.pools[0].in_use_kept == 1
    assert plan_layouts(ps.mig_strategies, ps.inventory()) == dict(end_state.layouts)


def test_overlapping_pools_and_unknown_products_are_errors(tmp_path):
    repo = _repo(tmp_path, [_node("h1", "inference")])
    (tmp_path / "mig.yaml").write_text(STRATEGY.replace("pool: training", "pool: inference"))
    from kgwe.policy import load_repository

    ps = load_repository(repo, checks=False)  # the loader's own cross-check reports this too
    with pytest.raises(KgweError, match="selected by both MIGStrategy inference and whole"):
        plan_policy(ps.mig_strategies, ps.inventory())
    with pytest.raises(KgweError, match="not in the GPU catalog"):
        model_of_product("n", "NVIDIA-Z1000")
    with pytest.raises(KgweError, match="ambiguous"):
        model_of_product("n", "H100")


def test_cli_table(repo, capsys):
    assert main(["plan-mig", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "pool inference: 3 node(s), 6 GPU(s) (H100-80GB)" in out
    assert "1g.10gb" in out and "70.0%" in out and "in-use instances kept: 1" in out
    assert "enable MIG" in out and "mig-parted configs:" in out


def test_cli_json_and_separate_inventory(repo, tmp_path_factory, capsys):
    other = tmp_path_factory.mktemp("inv") / "inv.yaml"
    other.write_text((repo / "inventory.yaml").read_text())
    (repo / "inventory.yaml").unlink()
    assert main(["plan-mig", str(repo), "--inventory", str(other), "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["pool"] for p in doc["pools"]] == ["inference", "whole"]
    assert set(doc["nodeConfigs"]) == {"h1", "h2", "h3", "t1"}
    assert all(name in doc["migConfigs"] for name in doc["nodeConfigs"].values())


def test_cli_errors_are_one_line(repo, capsys):
    (repo / "inventory.yaml").unlink()
    assert main(["plan-mig", str(repo)]) == 1
    assert "no GPUInventory" in capsys.readouterr().err
    assert main(["plan-mig", str(repo / "missing")]) == 1


def test_nodes_without_devices_take_their_layout_from_the_mig_config_label(tmp_path):
    def labelled(name, pool, config):
        return _node(name, pool).replace("      gpus: 2\n", f"      gpus: 2\n      migConfig: {config}\n")

    nodes = [labelled("h1", "inference", "all-balanced"), labelled("t1", "training", "all-1g.10gb")]
    ps = _policies(_repo(tmp_path, nodes))
    reqs = {r.name: r for r in pool_requests(ps.mig_strategies, ps.inventory())}
    assert [sorted(n for n, _ in g.layout) for g in reqs["inference"].gpus] == [
        ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    ] * 2
    assert [len(g.layout) for g in reqs["whole"].gpus] == [7, 7]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("all-disabled", None),
        ("kgwe-all-enabled", []),
        ("all-3g.40gb", ["3g.40gb", "3g.40gb"]),
        ("all-1g.10gb.me", ["1g.10gb+me"]),
        ("kgwe-all-2x1g.10gb-1x2g.20gb-1x3g.40gb", ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]),
    ],
)
def test_layout_from_config(config, expected):
    from kgwe.gpu import catalog
    from kgwe.planner.from_policy import layout_from_config

    assert layout_from_config(catalog.model_by_key("H100-80GB"), config) == expected
    assert layout_from_config(catalog.model_by_key("H100-80GB"), "custom-config") not in (None, [])


def test_cli_demand_file(repo, tmp_path_factory, capsys):
    demand = tmp_path_factory.mktemp("d") / "demand.yaml"
    demand.write_text("inference: {7g.80gb: 2}\n")
    assert main(["plan-mig", str(repo), "--demand", str(demand), "--output", "json"]) == 0
    pool = json.loads(capsys.readouterr().out)["pools"][0]
    assert pool["achievedCounts"]["7g.80gb"] == 2 and pool["unmet"] == {}
    demand.write_text("inference: {7g.80gb: many}\n")
    assert main(["plan-mig", str(repo), "--demand", str(demand)]) == 1
    assert "whole number" in capsys.readouterr().err
    demand.write_text("inferencing: {7g.80gb: 1}\n")
    assert main(["plan-mig", str(repo), "--demand", str(demand)]) == 1
    assert "demand names no MIGStrategy: inferencing" in capsys.readouterr().err


def test_a_strategy_selecting_no_node_plans_nothing_and_does_not_block_the_others(tmp_path):
    # Validation only warns about such a strategy, so planning (and so `kgwe render`) must not fail on it.
    repo = _repo(tmp_path, [_node("t1", "training")])
    ps = _policies(repo)
    assert plan_layouts(ps.mig_strategies, ps.inventory()) == {"t1": [None, None]}
    inference = next(p for p in plan_policy(ps.mig_strategies, ps.inventory()).pools if p.name == "inference")
    assert inference.gpus == () and inference.gpus_changed == 0
    assert inference.notes == ("the strategy selects no GPU node",)


def test_unhealthy_gpus_keep_their_layout_and_get_nothing_planned(tmp_path):
    """t1's GPU 1 runs 7g.80gb and the `whole` strategy wants MIG off: GPU 0 changes, the sick GPU 1 not."""
    sick = "- {index: 1, mig: [7g.80gb], unhealthy: true}\n"
    ps = _policies(_repo(tmp_path, [_node("t1", "training", sick)]))
    result = plan_policy(ps.mig_strategies, ps.inventory())
    assert result.layouts.get("t1", [None, ["7g.80gb"]])[1] == ["7g.80gb"]
    healthy = _policies(_repo(tmp_path, [_node("t1", "training", sick.replace("true", "false"))]))
    assert plan_policy(healthy.mig_strategies, healthy.inventory()).layouts["t1"] == [None, None]
