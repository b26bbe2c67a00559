"""The impact section of `kgwe plan`: which changes call for it, each revision's policy as the replay needs
it, and the side-by-side Markdown."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import orjson

from kgwe.impact.record import DemandRecord
from kgwe.impact.replay import PolicyView, ReplayResult
from kgwe.safetext import markdown_cell, markdown_text
from kgwe.vocab import SCORING_CONFIG_KEY

if TYPE_CHECKING:
    from kgwe.policy.loader import PolicySet
    from kgwe.policy.models import GPUInventory
    from kgwe.render.render import Rendered

# Policy kinds whose change can move placement, waiting or cost of the recorded demand.
IMPACT_KINDS = ("ScoringProfile", "MIGStrategy", "GPUBudget", "PricingCatalog", "SharingStrategy")

CANNOT_KNOW = (
    "A replay keeps each pod's recorded runtime wherever it lands: it cannot know how long a pod would "
    "really have run under another placement (faster on a better NVLink set, cancelled while waiting); "
    "recorded pods use the default scoring profile, and CPU and memory are not recorded."
)


def wants_impact(policy_change_keys: Iterable[str]) -> bool:
    """Does a plan's set of changed policy objects ("Kind/name") touch what a replay shows?"""
    return any(key.split("/", 1)[0] in IMPACT_KINDS for key in policy_change_keys)


def policy_view(policy_set: PolicySet, rendered: Rendered, inventory: GPUInventory) -> PolicyView:
    """One revision: its default scoring profile as the extender reads it from the rendered kgwe-scoring
    ConfigMap, the inventory idle with the revision's MIG layouts, its prices and budgets."""
    from kgwe.cost.budgets import budget_from_policy
    from kgwe.cost.pricing import pricebook_from_catalog
    from kgwe.extender.inventory import node_states
    from kgwe.extender.profile import DEFAULT_PROFILE, profiles_from_document

    profile = DEFAULT_PROFILE
    for obj in rendered.objects:
        if obj.get("kind") == "ConfigMap" and SCORING_CONFIG_KEY in (obj.get("data") or {}):
            profile = profiles_from_document(orjson.loads(obj["data"][SCORING_CONFIG_KEY]))[""]
    catalog = policy_set.pricing_catalog()
    return PolicyView(
        profile=profile,
        nodes=node_states(inventory, layouts=rendered.layouts, idle=True),
        book=pricebook_from_catalog(catalog) if catalog is not None else None,
        budgets=tuple(budget_from_policy(b) for b in policy_set.budgets),
    )


def markdown(record: DemandRecord, source: str, base: ReplayResult, head: ReplayResult, seed: int) -> str:
    days = record.window_seconds / 86400
    out = [
        "### Impact on recorded demand",
        "",
        f"Replayed {base.pods} GPU pods of {days:g} days ({record.since:%Y-%m-%d %H:%M} → "
        f"{record.until:%Y-%m-%d %H:%M} UTC, from {source}) on {base.gpus} GPUs in {base.nodes} nodes, "
        f"through the extender's scoring core with each revision's policy (seed {seed}).",
        "",
        "| | base | head | change |",
        "|---|---|---|---|",
        _row("GPU allocation, mean", base.alloc_mean_pct, head.alloc_mean_pct, "%"),
        _row("GPU allocation, p10 (hourly)", base.alloc_p10_pct, head.alloc_p10_pct, "%"),
        _row("fragmented GPU capacity (FGD), mean", base.fragmentation_pct, head.fragmentation_pct, "%"),
        _row("pods that waited", base.pods_waited, head.pods_waited, ""),
        _row("mean wait of those (min)", base.wait_mean_seconds / 60, head.wait_mean_seconds / 60, ""),
        _row("p90 wait (min)", base.wait_p90_seconds / 60, head.wait_p90_seconds / 60, ""),
        _row("longest wait (h)", base.wait_max_seconds / 3600, head.wait_max_seconds / 3600, ""),
        _row("pods never started in the window", base.never_started, head.never_started, ""),
    ]
    if base.mig_pods:
        out.append(
            _row(
                "MIG demand served",
                100.0 * base.mig_served / base.mig_pods,
                100.0 * head.mig_served / head.mig_pods,
                "%",
            )
        )
    teams = sorted(set(base.cost_by_team) | set(head.cost_by_team))
    for team in teams:
        b, h = base.cost_by_team.get(team), head.cost_by_team.get(team)
        label = markdown_cell(f"cost {team} ({head.currency})")
        out.append(f"| {label} | {b or 0} | {h or 0} | {(h or 0) - (b or 0):+} |")
    out.append("")
    for name, results in (("base", base), ("head", head)):
        for budget, projected, limit in results.budgets_exceeded:
            out.append(
                markdown_text(
                    f"- {name}: GPUBudget/{budget} would be exceeded: {projected} projected over its period "
                    f"at the replayed rate, limit {limit}"
                )
            )
    if base.budgets_exceeded or head.budgets_exceeded:
        out.append("")
    notes = list(record.notes)
    if base.scale < 1:
        notes.append(
            f"sampled: {base.pods} of {record.pods_seen} recorded pods replayed on the same fraction "
            f"({base.scale:.1%}) of each GPU product's nodes; costs scaled back up"
        )
    out += [f"> {markdown_text(n)}" for n in notes]
    out += [f"> {CANNOT_KNOW}", ""]
    return "\n".join(out)


def _row(label: str, b: float, h: float, unit: str) -> str:
    if isinstance(b, int) and isinstance(h, int):
        return f"| {label} | {b} | {h} | {h - b:+d} |"
    delta = " pt" if unit == "%" else ""  # percentage points
    return f"| {label} | {b:.1f}{unit} | {h:.1f}{unit} | {h - b:+.1f}{delta} |"
