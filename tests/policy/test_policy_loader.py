"""The loader and its checks: every problem is reported, with file:line:column and a field path."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from kgwe.cli import main
from kgwe.policy import Diagnostic, PolicySet, load_repository
from kgwe.resources import sample_repo_dir

H100_INVENTORY = """
apiVersion: kgwe.nvidia.io/v1
kind: GPUInventory
metadata: {name: inv}
spec:
  nodes:
    - name: h1
      labels: {pool: inference, gpu.nvidia.com/class: H100}
      gpus: 8
      product: NVIDIA-H100-80GB-HBM3
      topology: DGX-H100
    - name: l1
      labels: {pool: general}
      gpus: 8
      product: NVIDIA-L40S
      topology: L40S-8-PCIE
"""

PRICING = """
apiVersion: kgwe.nvidia.io/v1
kind: PricingCatalog
metadata: {name: default}
spec:
  currency: USD
  gpus:
    - {product: NVIDIA-H100-80GB-HBM3, onDemandPerHour: "4.10"}
    - {product: NVIDIA-L40S, onDemandPerHour: "1.20"}
"""

SCORING_HEAD = "apiVersion: kgwe.nvidia.io/v1\nkind: ScoringProfile\n"


def strategy(name: str, selector: str, profiles: str, extra: str = "") -> str:
    return textwrap.dedent(
        f"""
        apiVersion: kgwe.nvidia.io/v1
        kind: MIGStrategy
        metadata: {{name: {name}}}
        spec:
          nodeSelector: {selector}
          partitionStrategy:
            preferredProfiles: {profiles}
        {extra}"""
    )


def budget(
    name: str,
    namespaces: str,
    alerts: str = "[{at: 50%}, {at: 90%}]",
    currency: str = "USD",
    quota: str = "{nvidia.com/gpu: 8}",
) -> str:
    return textwrap.dedent(
        f"""
        apiVersion: kgwe.nvidia.io/v1
        kind: GPUBudget
        metadata: {{name: {name}}}
        spec:
          team: {name}
          namespaces: {namespaces}
          limit: {{amount: "1000", currency: {currency}}}
          quota: {quota}
          alerts: {alerts}
        """
    )


def repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip("\n"), encoding="utf-8")
    return tmp_path


def with_inventory(strategy_text: str) -> dict[str, str]:
    return {"inv.yaml": H100_INVENTORY, "price.yaml": PRICING, "s.yaml": strategy_text}


def errors(ps: PolicySet) -> list[Diagnostic]:
    return ps.errors


def one_error(ps: PolicySet, fragment: str) -> Diagnostic:
    hits = [d for d in ps.errors if fragment in d.message]
    assert len(hits) == 1, [str(d) for d in ps.diagnostics]
    return hits[0]


# -- syntax and file-level problems ------------------------------------------------------------------------


def test_yaml_syntax_error_has_line(tmp_path):
    ps = load_repository(
        repo(tmp_path, {"a.yaml": "apiVersion: kgwe.nvidia.io/v1\nkind: [MIGStrategy\nmetadata: x\n"})
    )
    d = one_error(ps, "YAML syntax error")
    assert (d.file, d.line) == ("a.yaml", 3)


def test_duplicate_key_is_an_error(tmp_path):
    text = strategy("s", "{pool: inference}", "[{1g.10gb: 100%}]") + "metadata: {name: t}\n"
    d = one_error(load_repository(repo(tmp_path, {"a.yaml": text})), "key appears twice")
    assert d.path == "metadata" and d.line == 8


def test_wrong_type_points_at_the_field(tmp_path):
    text = strategy("s", "{pool: inference}", "[{1g.10gb: 100%}]", "  rollout: {drain: maybe}")
    d = one_error(load_repository(repo(tmp_path, {"a.yaml": text})), "boolean")
    assert d.path == "spec.rollout.drain"
    assert (d.line, d.column) == (8, 13)


def test_unknown_kind_suggests_the_right_one(tmp_path):
    text = "apiVersion: kgwe.nvidia.io/v1\nkind: MIGStrategie\nmetadata: {name: a}\n"
    d = one_error(load_repository(repo(tmp_path, {"a.yaml": text})), "unknown kind")
    assert 'did you mean "MIGStrategy"' in d.message and d.line == 2


def test_unknown_field_suggests_the_right_one(tmp_path):
    text = strategy("s", "{pool: inference}", "[{1g.10gb: 100%}]").replace(
        "partitionStrategy", "partitionStrategie"
    )
    d = one_error(load_repository(repo(tmp_path, {"a.yaml": text})), "unknown field")
    assert 'did you mean "partitionStrategy"' in d.message
    assert d.path == "spec.partitionStrategie" and d.line == 6


def test_nested_unknown_field_suggestion(tmp_path):
    text = strategy("s", "{pool: inference}", "[{1g.10gb: 100%}]", "  rollout: {maxUnavailible: 1}")
    d = one_error(load_repository(repo(tmp_path, {"a.yaml": text})), "unknown field")
    assert 'did you mean "maxUnavailable"' in d.message


def test_foreign_api_version(tmp_path):
    text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n"
    d = one_error(load_repository(repo(tmp_path, {"a.yaml": text})), "not a KGWE apiVersion")
    assert d.path == "apiVersion"


def test_non_utf8_file(tmp_path):
    (tmp_path / "a.yaml").write_bytes(b"apiVersion: kgwe.nvidia.io/v1\nkind: \xff\xfe\n")
    d = one_error(load_repository(tmp_path), "not UTF-8")
    assert (d.line, d.column) == (2, 7)


def test_file_over_one_mib(tmp_path):
    (tmp_path / "big.yaml").write_text("# " + "x" * (1024 * 1024) + "\n")
    one_error(load_repository(tmp_path), "at most 1 MiB")


def test_symlink_leaving_the_repository(tmp_path):
    outside = tmp_path / "outside.yaml"
    outside.write_text(PRICING)
    root = tmp_path / "repo"
    repo(root, {"pricing.yaml": PRICING})
    os.symlink(outside, root / "escape.yaml")
    os.symlink(tmp_path, root / "escape-dir")
    ps = load_repository(root)
    msgs = [d for d in ps.errors if "symlink leaves the repository" in d.message]
    assert sorted(d.file for d in msgs) == ["escape-dir", "escape.yaml"]


def test_empty_repository(tmp_path):
    ps = load_repository(tmp_path)
    assert not ps.ok and "empty" in ps.errors[0].message


def test_only_comments_is_empty(tmp_path):
    ps = load_repository(repo(tmp_path, {"a.yaml": "# nothing\n"}))
    assert "no KGWE objects" in ps.errors[0].message


def test_dotfiles_and_reports_are_skipped(tmp_path):
    ps = load_repository(
        repo(
            tmp_path,
            {
                "pricing.yaml": PRICING,
                ".github/ci.yaml": "on: [push]\n",
                ".hidden.yaml": "not: kgwe\n",
                "reports/prod/2026-11.yaml": "whatever: {\n",
                "notes.md": "# not yaml\n",
            },
        )
    )
    assert ps.ok, [str(d) for d in ps.diagnostics]
    assert ps.files == 1


def test_all_errors_of_all_files_in_one_run(tmp_path):
    files = {
        "a.yaml": "kind: [\n",
        "b.yaml": "apiVersion: kgwe.nvidia.io/v1\nkind: Nope\nmetadata: {name: a}\n",
        "c.yml": strategy("s", "{pool: x}", "[{1g.10gb: 60%}]"),
    }
    ps = load_repository(repo(tmp_path, files))
    assert {d.file for d in ps.errors} == {"a.yaml", "b.yaml", "c.yml"}


# -- cross-object checks ------------------------------------------------------------------------------------


def test_profile_invalid_for_inventory_model(tmp_path):
    files = with_inventory(strategy("s", "{pool: inference}", "[{1g.5gb: 50%}, {2g.20gb: 50%}]"))
    d = one_error(load_repository(repo(tmp_path, files)), "not valid for H100-80GB")
    assert d.path == "spec.partitionStrategy.preferredProfiles[0]" and d.file == "s.yaml" and d.line == 7


def test_profile_narrowed_by_label_value_without_inventory(tmp_path):
    bad = strategy("s", "{gpu.nvidia.com/class: H100}", "[{1g.5gb: 100%}]")
    ok = strategy("t", "{gpu.nvidia.com/class: A100}", "[{1g.5gb: 100%}]")
    ps = load_repository(repo(tmp_path, {"bad.yaml": bad, "ok.yaml": ok}))
    d = one_error(ps, "is not valid for")
    assert d.file == "bad.yaml" and "H100-80GB" in d.message


def test_profile_unknown_anywhere_gets_a_suggestion(tmp_path):
    ps = load_repository(repo(tmp_path, {"s.yaml": strategy("s", "{pool: x}", "[{1g.10gbb: 100%}]")}))
    assert not ps.ok  # '1g.10gbb' is not even a profile name


def test_profiles_from_different_models(tmp_path):
    text = strategy("s", "{gpu.nvidia.com/class: H100}", "[{1g.10gb: 50%}, {1g.12gb: 50%}]")
    one_error(load_repository(repo(tmp_path, {"s.yaml": text})), "no single GPU model")


def test_shares_must_sum_to_100(tmp_path):
    text = strategy("s", "{gpu.nvidia.com/class: H100}", "[{1g.10gb: 70%}, {2g.20gb: 20%}]")
    d = one_error(load_repository(repo(tmp_path, {"s.yaml": text})), "add up to 90%")
    assert d.path == "spec.partitionStrategy.preferredProfiles"


def test_shares_and_counts_do_not_mix(tmp_path):
    text = strategy("s", "{gpu.nvidia.com/class: H100}", "[{1g.10gb: 70%}, {2g.20gb: 3}]")
    one_error(load_repository(repo(tmp_path, {"s.yaml": text})), "mixes shares")


def test_counts_beyond_pool_capacity(tmp_path):
    files = with_inventory(strategy("s", "{pool: inference}", "[{3g.40gb: 40}]"))
    one_error(load_repository(repo(tmp_path, files)), "compute slices but the selected nodes have 56")


def test_strategy_on_non_mig_nodes(tmp_path):
    files = with_inventory(strategy("s", "{pool: general}", "[{1g.10gb: 100%}]"))
    one_error(load_repository(repo(tmp_path, files)), "does not support MIG")


def test_overlapping_strategies(tmp_path):
    files = {
        "inv.yaml": H100_INVENTORY,
        "price.yaml": PRICING,
        "a.yaml": strategy("a", "{pool: inference}", "[{1g.10gb: 100%}]"),
        "b.yaml": strategy("b", "{gpu.nvidia.com/class: H100}", "[{7g.80gb: 100%}]"),
        "c.yaml": strategy("c", "{pool: training, gpu.nvidia.com/class: H100}", "[{7g.80gb: 100%}]"),
    }
    ps = load_repository(repo(tmp_path, files))
    overlaps = [d for d in ps.errors if "claims the same nodes" in d.message]
    # a/b overlap on node h1; b/c could share a node (compatible selectors); a/c differ on `pool`
    assert sorted((d.name, d.message.split('"')[1]) for d in overlaps) == [("b", "a"), ("c", "b")]
    assert "e.g. node h1" in next(d.message for d in overlaps if d.name == "b")


def test_strategy_selecting_no_inventory_node_is_a_warning(tmp_path):
    files = with_inventory(strategy("s", "{pool: nowhere, gpu.nvidia.com/class: H100}", "[{1g.10gb: 100%}]"))
    ps = load_repository(repo(tmp_path, files))
    assert ps.ok
    assert [d.severity for d in ps.warnings] == ["warning"] and "selects no node" in ps.warnings[0].message


def test_duplicate_names(tmp_path):
    files = {"a.yaml": PRICING, "b.yaml": PRICING}
    d = one_error(load_repository(repo(tmp_path, files)), 'duplicate PricingCatalog "default"')
    assert d.file == "b.yaml" and "a.yaml:1" in d.message


def test_namespace_claimed_by_two_budgets(tmp_path):
    files = {"a.yaml": budget("a", "[ns1, ns2]"), "b.yaml": budget("b", "[ns3, ns2]")}
    d = one_error(load_repository(repo(tmp_path, files)), 'namespace "ns2" is already claimed')
    assert d.file == "b.yaml" and d.path == "spec.namespaces[1]"


def test_alert_thresholds_must_increase(tmp_path):
    files = {"a.yaml": budget("a", "[ns1]", alerts="[{at: 80%}, {at: 50%}, {at: 100%, action: Enforce}]")}
    d = one_error(load_repository(repo(tmp_path, files)), "must increase")
    assert d.path == "spec.alerts[1].at"


def test_quota_mig_resource_must_exist(tmp_path):
    files = {"a.yaml": budget("a", "[ns1]", quota="{nvidia.com/mig-1g.10g: 4}")}
    d = one_error(load_repository(repo(tmp_path, files)), "names no MIG profile")
    assert 'did you mean "1g.10gb"' in d.message


def test_budget_currency_must_match_pricing(tmp_path):
    files = {"a.yaml": budget("a", "[ns1]", currency="EUR"), "p.yaml": PRICING}
    one_error(load_repository(repo(tmp_path, files)), "prices in USD")


@pytest.mark.parametrize(
    "weights", ["{topology: 140}", "{resource: -1}", "{topology: 0, resource: 0, balance: 0}"]
)
def test_weights_in_range(tmp_path, weights):
    text = f"{SCORING_HEAD}metadata: {{name: s}}\nspec:\n  weights: {weights}\n"
    ps = load_repository(repo(tmp_path, {"s.yaml": text}))
    assert len(ps.errors) == 1 and ps.errors[0].path.startswith("spec.weights")


def test_extender_weight_must_be_positive(tmp_path):
    text = SCORING_HEAD + "metadata: {name: s}\nspec:\n  extender: {weight: 0}\n"
    d = load_repository(repo(tmp_path, {"s.yaml": text})).errors[0]
    assert d.path == "spec.extender.weight"


def test_two_default_scoring_profiles(tmp_path):
    text = SCORING_HEAD + "metadata: {{name: {}}}\nspec: {{default: true}}\n"
    ps = load_repository(repo(tmp_path, {"a.yaml": text.format("a"), "b.yaml": text.format("b")}))
    one_error(ps, "a second default ScoringProfile")


def test_prices_for_every_inventory_product(tmp_path):
    pricing = PRICING.replace('    - {product: NVIDIA-L40S, onDemandPerHour: "1.20"}\n', "")
    d = one_error(
        load_repository(repo(tmp_path, {"inv.yaml": H100_INVENTORY, "p.yaml": pricing})), "no price"
    )
    assert d.file == "inv.yaml" and d.path == "spec.nodes[1].product" and d.line == 14


def test_unknown_topology_name(tmp_path):
    inv = H100_INVENTORY.replace("topology: DGX-H100", "topology: DGX-H10")
    d = one_error(load_repository(repo(tmp_path, {"inv.yaml": inv, "p.yaml": PRICING})), "unknown topology")
    assert "did you mean" in d.message


def test_inventory_layout_must_fit(tmp_path):
    inv = H100_INVENTORY.replace(
        "      topology: DGX-H100\n",
        "      topology: DGX-H100\n      devices: [{index: 0, mig: [4g.40gb, 4g.40gb]}]\n",
    )
    one_error(load_repository(repo(tmp_path, {"inv.yaml": inv, "p.yaml": PRICING})), "do not fit")


def test_gpu_workload_manifest_validates(tmp_path):
    text = textwrap.dedent(
        """
        apiVersion: kgwe.nvidia.io/v1
        kind: GPUWorkload
        metadata: {name: w}
        spec:
          gpuRequirements: {count: 4, migProfile: 1g.10gbx, topology: {preference: NVLink}}
        """
    )
    ps = load_repository(repo(tmp_path, {"w.yaml": text}))
    assert {d.path for d in ps.errors} == {
        "spec.gpuRequirements.migProfile",
        "spec.gpuRequirements.topology.preference",
    }


# -- sample repository and CLI ------------------------------------------------------------------------------


def test_sample_repo_is_valid():
    ps = load_repository(sample_repo_dir())
    assert ps.ok and not ps.warnings, [str(d) for d in ps.diagnostics]
    assert len(ps.budgets) == 3 and len(ps.scoring_profiles) == 3 and len(ps.mig_strategies) == 2
    assert 18 <= len(ps.inventory().spec.nodes) <= 24


def _inject(path: Path, old: str, new: str) -> int:
    text = path.read_text()
    assert old in text, old
    text = text.replace(old, new, 1)
    path.write_text(text)
    return text[: text.index(new)].count("\n") + 1


def test_five_injected_errors_are_all_reported(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(sample_repo_dir(), root)
    expected = {
        ("mig/inference-h100.yaml", _inject(root / "mig/inference-h100.yaml", "1g.10gb: 70%", "1g.5gb: 70%")),
        (
            "scoring/default.yaml",
            _inject(root / "scoring/default.yaml", "strategy: BestFit", "strategy: BestFitting"),
        ),
        (
            "budgets/ml-research.yaml",
            _inject(
                root / "budgets/ml-research.yaml",
                "namespaces: [ml-training,",
                "namespaces: [ds-notebooks, ml-training,",
            ),
        ),
        (
            "pricing/catalog.yaml",
            _inject(root / "pricing/catalog.yaml", 'onDemandPerHour: "1.20"', "onDemandPerHour: 1.20"),
        ),
        (
            "budgets/inference-platform.yaml",
            _inject(
                root / "budgets/inference-platform.yaml",
                "  period: Monthly",
                "  perod: Weekly\n  period: Monthly",
            ),
        ),
    }
    ps = load_repository(root)
    got = {(d.file, d.line) for d in ps.errors}
    assert expected <= got, (expected, [str(d) for d in ps.errors])
    assert len(ps.errors) == 5


def test_cli_validate_sample_repo_exit_0(capsys):
    assert main(["validate", str(sample_repo_dir())]) == 0
    assert "valid" in capsys.readouterr().out


def test_cli_validate_json_and_exit_1(tmp_path, capsys):
    repo(tmp_path, {"s.yaml": strategy("s", "{gpu.nvidia.com/class: H100}", "[{1g.10gb: 70%}]")})
    assert main(["validate", str(tmp_path), "--output", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    assert report["errors"][0]["file"] == "s.yaml" and report["errors"][0]["line"] == 7


def test_cli_never_prints_a_traceback(tmp_path, capsys):
    (tmp_path / "a.yaml").write_bytes(b"\x00\x01\x02: [")
    assert main(["validate", str(tmp_path)]) == 1
    assert main(["validate", str(tmp_path / "missing")]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert "no such file" in captured.err


def test_single_file_path(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text(PRICING)
    assert main(["validate", str(path)]) == 0


def test_selector_naming_a_non_mig_gpu(tmp_path):
    ps = load_repository(
        repo(tmp_path, {"s.yaml": strategy("s", "{gpu.nvidia.com/class: L40S}", "[{1g.10gb: 100%}]")})
    )
    one_error(ps, "do not support MIG (L40S)")


def test_selector_naming_two_different_gpus(tmp_path):
    text = strategy(
        "s",
        "{gpu.nvidia.com/class: A100, nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}",
        "[{1g.10gb: 100%}]",
    )
    one_error(load_repository(repo(tmp_path, {"s.yaml": text})), "exclude each other")


def test_several_scoring_profiles_need_a_default(tmp_path):
    text = SCORING_HEAD + "metadata: {{name: {}}}\nspec: {{strategy: Spread}}\n"
    ps = load_repository(repo(tmp_path, {"a.yaml": text.format("a"), "b.yaml": text.format("b")}))
    one_error(ps, "none has `default: true`")


def test_profile_listed_twice(tmp_path):
    text = strategy("s", "{gpu.nvidia.com/class: H100}", "[{1g.10gb: 50%}, {1g.10gb: 50%}]")
    d = one_error(load_repository(repo(tmp_path, {"s.yaml": text})), "listed twice")
    assert d.path == "spec.partitionStrategy.preferredProfiles[1]"


def test_workload_without_metadata_is_only_a_warning(tmp_path, capsys):
    text = "apiVersion: kgwe.nvidia.io/v1\nkind: GPUWorkload\nspec:\n  gpuRequirements: {count: 2}\n"
    repo(tmp_path, {"w.yaml": text})
    assert main(["validate", str(tmp_path)]) == 0
    assert "warning" in capsys.readouterr().out


def test_gpu_count_must_match_the_topology(tmp_path):
    inv = H100_INVENTORY.replace(
        "      gpus: 8\n      product: NVIDIA-H100", "      gpus: 4\n      product: NVIDIA-H100"
    )
    d = one_error(
        load_repository(repo(tmp_path, {"inv.yaml": inv, "p.yaml": PRICING})), "topology DGX-H100 has 8"
    )
    assert d.path == "spec.nodes[0].gpus"


# -- MIG rebalancing settings ------------------------------------------------------------------------------

REBALANCING = """
apiVersion: kgwe.nvidia.io/v1
kind: MIGStrategy
metadata: {name: s}
spec:
  nodeSelector: {pool: inference}
  partitionStrategy:
    preferredProfiles: [{3g.40gb: 100%%}]
%s
"""


@pytest.mark.parametrize(
    ("settings", "line", "path", "fragment"),
    [
        ("    rebalanceInterval: 1s", 8, "spec.partitionStrategy.rebalanceInterval", "between 5s and 24h"),
        ("    rebalanceInterval: 48h", 8, "spec.partitionStrategy.rebalanceInterval", "between 5s and 24h"),
        (
            "    minUtilizationThreshold: 0.3",
            8,
            "spec.partitionStrategy.minUtilizationThreshold",
            "no effect without rebalanceInterval",
        ),
        (
            "    rebalanceMaxGPUs: 2",
            8,
            "spec.partitionStrategy.rebalanceMaxGPUs",
            "no effect without rebalanceInterval",
        ),
        (
            "    rebalanceInterval: 5m\n    rebalanceMaxGPUs: 0%",
            9,
            "spec.partitionStrategy.rebalanceMaxGPUs",
            "at least one GPU",
        ),
        (
            "    rebalanceInterval: 5m\n    rebalanceStabilizationWindow: 1m",
            9,
            "spec.partitionStrategy.rebalanceStabilizationWindow",
            "at least rebalanceInterval (5m)",
        ),
        (
            "    rebalanceInterval: 5m\n    minUtilizationThreshold: 1.5",
            9,
            "spec.partitionStrategy.minUtilizationThreshold",
            "less than or equal to 1",
        ),
    ],
)
def test_every_bad_rebalancing_setting_is_an_error_at_its_line(tmp_path, settings, line, path, fragment):
    ps = load_repository(repo(tmp_path, with_inventory(REBALANCING % settings)))
    d = one_error(ps, fragment)
    assert (d.file, d.line, d.path) == ("s.yaml", line, path)


def test_rebalancing_defaults(tmp_path):
    text = REBALANCING % "    rebalanceInterval: 5m\n    rebalanceMaxGPUs: 10%"
    ps = load_repository(repo(tmp_path, with_inventory(text)))
    assert not ps.errors, [str(d) for d in ps.errors]
    partition = ps.mig_strategies[0].spec.partition_strategy
    assert partition.stabilization_window == timedelta(minutes=15)  # 3 intervals
    assert partition.max_gpus_per_rebalance(64) == 6 and partition.max_gpus_per_rebalance(3) == 1


def test_a_seed_gpuworkload_is_pointed_at_kgwe_convert(tmp_path):
    (tmp_path / "wl.yaml").write_text(
        "apiVersion: gpu.warp.dev/v1alpha1\nkind: GPUWorkload\nmetadata: {name: m}\nspec: {gpuCount: 2}\n"
    )
    (error,) = load_repository(tmp_path).errors
    assert (error.line, error.path) == (1, "apiVersion")
    # the command names the file as the user can reach it: under the directory given, or the file given
    assert "GPU_Orchestrator's GPUWorkload" in error.message
    assert f"`kgwe convert {tmp_path / 'wl.yaml'}`" in error.message
    (error,) = load_repository(tmp_path / "wl.yaml").errors
    assert f"`kgwe convert {tmp_path / 'wl.yaml'}`" in error.message


@pytest.mark.parametrize(("rate", "words"), [('"150%"', "at most 100%"), ("0.2", "percentage like '70%'")])
def test_spot_interruption_rate_is_a_share_of_nodes(tmp_path, rate, words):
    text = PRICING + f"  spotInterruptionRate: {rate}\n"
    d = one_error(load_repository(repo(tmp_path, {"p.yaml": text})), words)
    assert (d.file, d.line, d.path) == ("p.yaml", 9, "spec.spotInterruptionRate")


def test_spot_interruption_rate_reaches_the_price_book(tmp_path):
    from decimal import Decimal

    from kgwe.cost.pricing import pricebook_from_catalog
    from kgwe.policy.pricing import PricingCatalog

    ps = load_repository(repo(tmp_path, {"p.yaml": PRICING + '  spotInterruptionRate: "7.5%"\n'}))
    assert pricebook_from_catalog(ps.objects(PricingCatalog)[0]).spot_interruption_percent == Decimal("7.5")
    ps = load_repository(repo(tmp_path / "default", {"p.yaml": PRICING}))
    assert pricebook_from_catalog(ps.objects(PricingCatalog)[0]).spot_interruption_percent == Decimal("20")
