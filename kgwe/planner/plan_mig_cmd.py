"""Plan MIG layouts for every MIGStrategy pool of a policy repository and show how well each pool is served.

Reads the repository at PATH (default: current directory) and a GPUInventory (from --inventory FILE, else
the one in the repository). Prints, per pool, target vs achieved compute-slice share per profile, GPUs
changed, in-use instances kept and idle slices, followed by every change and its reason.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kgwe.errors import KgweError
from kgwe.planner.from_policy import PolicyPlan, plan_policy
from kgwe.planner.migparted import build_mig_configs
from kgwe.planner.model import PoolPlan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", default=".", help="policy repository (directory or YAML file)")
    parser.add_argument("--inventory", metavar="FILE", help="GPUInventory YAML (default: the repository's)")
    parser.add_argument(
        "--demand", metavar="FILE", help="YAML map: MIGStrategy name -> {profile: instances wanted}"
    )
    parser.add_argument("--output", choices=["text", "json"], default="text")
    parser.add_argument("--quiet", action="store_true", help="omit the per-GPU change list")
    parser.add_argument(
        "--wave", action="store_true", help="plan only the next rollout wave (maxUnavailable nodes per pool)"
    )


def _load(args: argparse.Namespace) -> PolicyPlan:
    from kgwe.policy import load_repository  # imported here: the planner core does not need pydantic

    policies = load_repository(args.path)
    policies.raise_for_errors()
    if args.inventory:
        inv_set = load_repository(args.inventory)
        inv_set.raise_for_errors()
        inventory = inv_set.inventory()
        if inventory is None:
            raise KgweError(f"{args.inventory}: no GPUInventory found")
    else:
        inventory = policies.inventory()
        if inventory is None:
            raise KgweError(f"{args.path}: no GPUInventory in the repository; pass --inventory FILE")
    if not policies.mig_strategies:
        raise KgweError(f"{args.path}: no MIGStrategy in the repository")
    demand = _demand(args.demand) if args.demand else None
    return plan_policy(policies.mig_strategies, inventory, demand, waves=args.wave)


def _demand(path: str) -> dict[str, dict[str, int]]:
    """Read and check a demand file; errors name the file and the bad entry."""
    from kgwe.policy.yaml_source import MAX_TEXT_BYTES, YamlSyntaxError, load_one

    try:
        with open(path, "rb") as f:
            data = load_one(f.read(MAX_TEXT_BYTES + 1)) or {}
    except OSError as exc:
        raise KgweError(f"{path}: {exc.strerror or exc}") from None
    except YamlSyntaxError as exc:
        raise KgweError(f"{path}:{exc.line}:{exc.column}: not usable YAML ({exc})") from None
    if not isinstance(data, dict):
        raise KgweError(f"{path}: expected a map of MIGStrategy name -> {{profile: count}}")
    out: dict[str, dict[str, int]] = {}
    for pool, wanted in data.items():
        if not isinstance(wanted, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in wanted.items()
        ):
            raise KgweError(f"{path}: {pool}: expected {{profile: whole number >= 0}}, got {wanted!r}")
        out[str(pool)] = dict(wanted)
    return out


def _pool_text(plan: PoolPlan, quiet: bool) -> list[str]:
    nodes = {g.node for g in plan.gpus}
    models = sorted({g.model for g in plan.gpus})
    lines = [f"pool {plan.name}: {len(nodes)} node(s), {len(plan.gpus)} GPU(s) ({', '.join(models) or '-'})"]
    if plan.achieved_counts:
        lines.append(f"  {'profile':<14}{'target':>9}{'achieved':>10}{'instances':>11}{'wanted':>8}")
        for name in plan.achieved_counts:
            target = f"{plan.target_shares[name]:.1%}" if plan.target_shares.get(name) else "-"
            lines.append(
                f"  {name:<14}{target:>9}{plan.achieved_shares[name]:>10.1%}"
                f"{plan.achieved_counts[name]:>11}{plan.wanted_counts.get(name, 0):>8}"
            )
    lines.append(
        f"  GPUs changed: {plan.gpus_changed} on {plan.nodes_changed} node(s); "
        f"in-use instances kept: {plan.in_use_kept}, destroyed: {plan.in_use_destroyed}; "
        f"idle slices: {plan.idle_compute_slices} compute, {plan.idle_memory_slices} memory"
    )
    lines.extend(f"  note: {n}" for n in plan.notes)
    if plan.unmet:
        lines.append("  unmet: " + ", ".join(f"{n} {k}" for n, k in sorted(plan.unmet.items())))
    if not quiet:
        lines.extend(f"    {g.node}/{g.index}: {g.reason}" for g in plan.changes())
    return lines


def _pool_json(plan: PoolPlan) -> dict[str, Any]:
    return {
        "pool": plan.name,
        "targetShares": dict(plan.target_shares),
        "achievedShares": dict(plan.achieved_shares),
        "achievedCounts": dict(plan.achieved_counts),
        "unmet": dict(plan.unmet),
        "gpusChanged": plan.gpus_changed,
        "nodesChanged": plan.nodes_changed,
        "inUseKept": plan.in_use_kept,
        "inUseDestroyed": plan.in_use_destroyed,
        "deferred": plan.deferred,
        "idleComputeSlices": plan.idle_compute_slices,
        "idleMemorySlices": plan.idle_memory_slices,
        "notes": list(plan.notes),
        "changes": [
            {"node": g.node, "index": g.index, "target": g.target_profiles, "reason": g.reason}
            for g in plan.changes()
        ],
    }


def run(args: argparse.Namespace) -> int:
    result = _load(args)
    configs, node_configs = build_mig_configs(result.layouts)
    if args.output == "json":
        pools = [_pool_json(p) for p in result.pools]
        doc = {"pools": pools, "migConfigs": configs, "nodeConfigs": node_configs}
        print(json.dumps(doc, indent=2, sort_keys=False))
        return 0
    out: list[str] = []
    for plan in result.pools:
        out.extend(_pool_text(plan, args.quiet))
        out.append("")
    out.append(f"mig-parted configs: {len(configs)} for {len(node_configs)} node(s)")
    print("\n".join(out))
    return 0
