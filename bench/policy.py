"""Policy figures: `kgwe validate` on a generated 2,000-file repository, `kgwe render` for 1,250 8-GPU nodes.

Prints the figures, then (last line) one JSON object:
  validate_seconds_2000_files  load + validate + cross-checks of 2,000 policy files (target <= 2 s)
  render_seconds_1250_nodes    plan MIG layouts + render all objects for 1,250 8-GPU nodes (target <= 1 s)
Best of N runs (--quick: fewer). Files are generated into a temporary directory, nothing is kept.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from kgwe.policy import load_repository
from kgwe.render import RenderOptions, render
from kgwe.render.layouts import desired_layouts
from kgwe.render.output import write_files

STRATEGY = """# yaml-language-server: $schema=../schemas/migstrategy.schema.json
apiVersion: kgwe.nvidia.io/v1
kind: MIGStrategy
metadata:
  name: pool-{i:04d}
spec:
  nodeSelector:
    gpu.nvidia.com/class: H100
    kgwe.nvidia.io/pool: pool-{i:04d}
  partitionStrategy:
    preferredProfiles:
      - 1g.10gb: 70%
      - 2g.20gb: 20%
      - 3g.40gb: 10%
    rebalanceInterval: 5m
  rollout: {{maxUnavailable: 10%, drain: false}}
"""
BUDGET = """apiVersion: kgwe.nvidia.io/v1
kind: GPUBudget
metadata:
  name: team-{i:04d}
spec:
  team: team-{i:04d}
  namespaces: [team-{i:04d}-train, team-{i:04d}-serve]
  period: Monthly
  limit: {{amount: "25000", currency: USD}}
  quota: {{nvidia.com/gpu: 16, nvidia.com/mig-1g.10gb: 28}}
  alerts: [{{at: 50%}}, {{at: 80%}}, {{at: 100%, action: Enforce}}]
"""
SCORING = """apiVersion: kgwe.nvidia.io/v1
kind: ScoringProfile
metadata:
  name: profile-{i:04d}
spec:
  default: {default}
  weights: {{topology: 40, resource: 35, balance: 25}}
  strategy: BinPack
  extender: {{weight: 5, ignorable: false, httpTimeout: 2s}}
"""
PRICING = """apiVersion: kgwe.nvidia.io/v1
kind: PricingCatalog
metadata: {name: default}
spec:
  currency: USD
  gpus:
    - {product: NVIDIA-H100-80GB-HBM3, onDemandPerHour: "4.10", spotPerHour: "1.60"}
    - {product: NVIDIA-A100-SXM4-80GB, onDemandPerHour: "2.45"}
"""


def inventory_text(nodes: int, pools: int, mig_fraction: float = 0.5) -> str:
    lines = [
        "apiVersion: kgwe.nvidia.io/v1",
        "kind: GPUInventory",
        "metadata: {name: bench}",
        "spec:",
        "  nodes:",
    ]
    for n in range(nodes):
        h100 = n < nodes * mig_fraction
        product = "NVIDIA-H100-80GB-HBM3" if h100 else "NVIDIA-A100-SXM4-80GB"
        cls = "H100" if h100 else "A100"
        pool = f"pool-{n % pools:04d}" if h100 else "training"
        topology = "DGX-H100" if h100 else "DGX-A100"
        lines.append(
            f"    - {{name: node-{n:05d}, gpus: 8, product: {product}, topology: {topology},"
            f" labels: {{gpu.nvidia.com/class: {cls}, kgwe.nvidia.io/pool: {pool}}}}}"
        )
    return "\n".join(lines) + "\n"


def generate_repository(root: Path, files: int) -> None:
    """`files` policy files: strategies, budgets, scoring profiles, one pricing catalog, one inventory."""
    (root / "mig").mkdir(parents=True)
    (root / "budgets").mkdir()
    (root / "scoring").mkdir()
    (root / "pricing.yaml").write_text(PRICING)
    strategies = files // 4
    (root / "inventory.yaml").write_text(inventory_text(strategies * 2, strategies))
    for i in range(strategies):
        (root / "mig" / f"pool-{i:04d}.yaml").write_text(STRATEGY.format(i=i))
    scoring = 10
    for i in range(scoring):
        (root / "scoring" / f"profile-{i:04d}.yaml").write_text(
            SCORING.format(i=i, default=str(i == 0).lower())
        )
    for i in range(files - strategies - scoring - 2):
        (root / "budgets" / f"team-{i:04d}.yaml").write_text(BUDGET.format(i=i))


def best_of(runs: int, fn) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one run each")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else 3
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        generate_repository(repo, 2000)
        count = sum(1 for _ in repo.rglob("*.yaml"))
        ps = load_repository(repo)
        assert ps.ok, [str(d) for d in ps.errors[:5]]
        validate_s = best_of(runs, lambda: load_repository(repo))
        print(
            f"validate: {count} files, {len(ps.entries)} objects, {len(ps.diagnostics)} diagnostics: "
            f"{validate_s:.3f} s"
        )

        render_repo = Path(tmp) / "render"
        render_repo.mkdir()
        (render_repo / "pricing.yaml").write_text(PRICING)
        (render_repo / "scoring.yaml").write_text(SCORING.format(i=0, default="true"))
        for i in range(4):
            (render_repo / f"pool-{i}.yaml").write_text(STRATEGY.format(i=i))
        (render_repo / "inventory.yaml").write_text(inventory_text(1250, 4, mig_fraction=0.8))
        rps = load_repository(render_repo)
        assert rps.ok, [str(d) for d in rps.errors[:5]]
        inventory = rps.inventory()
        out = Path(tmp) / "out"

        def full_render() -> None:
            result = render(rps, inventory, options=RenderOptions(repository="bench"))
            write_files(result.files, out)

        render_s = best_of(runs, full_render)
        layouts = desired_layouts(rps.mig_strategies, inventory)
        templates_s = best_of(runs, lambda: write_files(render(rps, inventory, layouts=layouts).files, out))
        result = render(rps, inventory)
        print(
            f"render: 1250 nodes x 8 GPUs, {len(result.objects)} objects, "
            f"{len(set(result.node_configs.values()))} mig-parted configs: {render_s:.3f} s "
            f"(planner + templates + files); templates + files alone {templates_s:.3f} s"
        )
    print(
        json.dumps(
            {
                "validate_seconds_2000_files": round(validate_s, 3),
                "render_seconds_1250_nodes": round(render_s, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
