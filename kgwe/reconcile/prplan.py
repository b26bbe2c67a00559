"""What a pull request would do, as Markdown: the pure half of `kgwe plan`.

Input: the policy sets and renders of the base and head revisions against one inventory. Output: objects
added/changed/removed, per pool the MIG layout changes (GPUs repartitioned, nodes needing a drain or an
idle wait), and policy field changes (scheduler/scoring, budgets/quotas, pricing, strategies)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from kgwe.cluster.apply import ObjectRef
from kgwe.policy.base import KgweObject
from kgwe.reconcile.rebalancing import PoolPreview
from kgwe.render.render import Rendered
from kgwe.safetext import code_fence, escape, markdown_cell, markdown_text


@dataclass
class PlanReport:
    added: list[ObjectRef] = field(default_factory=list)
    removed: list[ObjectRef] = field(default_factory=list)
    changed: dict[ObjectRef, str] = field(default_factory=dict)  # ref -> unified diff
    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    policy_changes: dict[str, list[str]] = field(default_factory=dict)  # "Kind/name" -> field changes
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # shown first: what makes the plan itself doubtful
    rendered: tuple[Rendered, Rendered] | None = None  # (base, head) renders, for the impact replay

    @property
    def has_changes(self) -> bool:
        return bool(
            self.added
            or self.removed
            or self.changed
            or self.policy_changes
            or any(p["gpus_changed"] for p in self.pools.values())
        )


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (embedded config files) as literal blocks, so their diff reads line by line."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_representer)


def _dump(obj: Mapping[str, Any]) -> str:
    return yaml.dump(dict(obj), Dumper=_BlockDumper, sort_keys=True, default_flow_style=False, width=1000)


def diff_objects(base: Sequence[dict[str, Any]], head: Sequence[dict[str, Any]], report: PlanReport) -> None:
    b = {ObjectRef.of(o): o for o in base if o.get("kind") != "Node"}
    h = {ObjectRef.of(o): o for o in head if o.get("kind") != "Node"}
    report.added = sorted(set(h) - set(b))
    report.removed = sorted(set(b) - set(h))
    for ref in sorted(set(b) & set(h)):
        if b[ref] != h[ref]:
            lines = difflib.unified_diff(
                _dump(b[ref]).splitlines(),
                _dump(h[ref]).splitlines(),
                f"base/{ref}",
                f"head/{ref}",
                lineterm="",
                n=2,
            )
            report.changed[ref] = "\n".join(lines)


def _flatten(value: object, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    return {prefix: value}


def diff_policies(base: Sequence[KgweObject], head: Sequence[KgweObject], report: PlanReport) -> None:
    """Field-level changes of every policy object (KgweObject) between the two revisions."""

    def index(objs: Sequence[KgweObject]) -> dict[str, dict[str, Any]]:
        return {
            f"{o.kind}/{o.name}": o.to_yaml_dict().get("spec", {})
            for o in objs
            if o.kind not in ("GPUInventory",)
        }

    b, h = index(base), index(head)
    for key in sorted(set(b) | set(h)):
        if key not in b:
            report.policy_changes[key] = ["added"]
            continue
        if key not in h:
            report.policy_changes[key] = ["removed"]
            continue
        fb, fh = _flatten(b[key]), _flatten(h[key])
        changes = []
        for path in sorted(set(fb) | set(fh)):
            if fb.get(path, "∅") != fh.get(path, "∅"):
                old, new = _short(fb.get(path, "(unset)")), _short(fh.get(path, "(unset)"))
                changes.append(f"`{path}`: {old} → {new}")
        if changes:
            report.policy_changes[key] = changes


def _short(value: object) -> str:
    text = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    return text if len(text) <= 80 else text[:77] + "..."


def diff_layouts(
    base: Mapping[str, Sequence[Sequence[str] | None]],
    head: Mapping[str, Sequence[Sequence[str] | None]],
    node_pool: Mapping[str, str],
    busy_gpus: Mapping[str, set[int]],
    drain: Mapping[str, bool],
    report: PlanReport,
) -> None:
    """Per pool: GPUs whose layout changes, nodes touched, and which of those hold busy GPUs."""
    for node in sorted(set(base) | set(head)):
        pool = node_pool.get(node, "(no pool)")
        entry = report.pools.setdefault(
            pool,
            {
                "nodes": 0,
                "gpus": 0,
                "gpus_changed": 0,
                "nodes_changed": [],
                "drain": [],
                "wait_idle": [],
                "examples": [],
            },
        )
        old, new = list(base.get(node) or []), list(head.get(node) or [])
        width = max(len(old), len(new))
        old += [None] * (width - len(old))
        new += [None] * (width - len(new))
        entry["nodes"] += 1
        entry["gpus"] += width
        changed = [i for i in range(width) if _norm(old[i]) != _norm(new[i])]
        if not changed:
            continue
        entry["gpus_changed"] += len(changed)
        entry["nodes_changed"].append(node)
        if set(changed) & busy_gpus.get(node, set()):
            (entry["drain"] if drain.get(pool) else entry["wait_idle"]).append(node)
        if len(entry["examples"]) < 3:
            i = changed[0]
            entry["examples"].append(f"{node} GPU {i}: {_layout_text(old[i])} → {_layout_text(new[i])}")


def _norm(layout: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if layout is None else tuple(sorted(layout))


def _layout_text(layout: Sequence[str] | None) -> str:
    if layout is None:
        return "MIG disabled"
    if not layout:
        return "MIG enabled, no instances"
    counts: dict[str, int] = {}
    for p in layout:
        counts[p] = counts.get(p, 0) + 1
    return " + ".join(f"{n}×{p}" if n > 1 else p for p, n in sorted(counts.items()))


def markdown(report: PlanReport, *, base: str, head: str, inventory_source: str) -> str:
    out = [f"## KGWE plan: `{base}` → `{head}`", ""]
    for warning in report.warnings:
        out += [f"> **Warning**: {warning}", ""]
    if not report.has_changes:
        out += ["No changes: the cluster would stay exactly as it is.", ""]
    out.append(f"Inventory: {inventory_source}")
    out.append("")
    if report.added or report.removed or report.changed:
        out += ["### Objects", "", "| change | object |", "|---|---|"]
        out += [f"| added | `{r}` |" for r in report.added]
        out += [f"| changed | `{r}` |" for r in report.changed]
        out += [f"| removed | `{r}` |" for r in report.removed]
        out.append("")
    pools = {k: v for k, v in report.pools.items() if v["gpus_changed"]}
    if pools:
        out += [
            "### MIG layout changes",
            "",
            "| pool | GPUs repartitioned | nodes changed | nodes to drain | nodes waiting for idle |",
            "|---|---|---|---|---|",
        ]
        for pool, p in sorted(pools.items()):
            cells = (
                pool,
                f"{p['gpus_changed']} of {p['gpus']}",
                f"{len(p['nodes_changed'])} of {p['nodes']}",
                _names(p["drain"]),
                _names(p["wait_idle"]),
            )
            out.append("| " + " | ".join(markdown_cell(c) for c in cells) + " |")
        out.append("")
        for pool, p in sorted(pools.items()):
            for example in p["examples"]:
                out.append(markdown_text(f"- {pool}: {example}"))
        out.append("")
    if report.policy_changes:
        out += ["### Policy changes (scheduler and scoring, budgets and quotas, pricing, MIG strategies)", ""]
        for key, changes in sorted(report.policy_changes.items()):
            said = (
                "; ".join(changes)
                if len(changes) <= 6
                else "; ".join(changes[:6]) + f"; and {len(changes) - 6} more"
            )
            out.append(markdown_text(f"- **{key}**: {said}"))
        out.append("")
    if report.changed:
        out += ["<details><summary>Object diffs</summary>", ""]
        for ref, text in report.changed.items():
            fence = code_fence(text)  # a diff of committed text cannot close its block early
            out += [f"`{ref}`", "", f"{fence}diff", escape(text, keep="\n\t"), fence, ""]
        out += ["</details>", ""]
    out += [f"> {markdown_text(n)}" for n in report.notes]
    return "\n".join(out).rstrip() + "\n"


def _names(names: Sequence[str]) -> str:
    if not names:
        return "0"
    shown = ", ".join(names[:5])
    return f"{len(names)} ({shown}{', …' if len(names) > 5 else ''})"


MAX_REBALANCE_GPU_LINES = 8


def rebalance_markdown(previews: Sequence[PoolPreview], inventory_source: str) -> str:
    """The "Next MIG rebalance" section: per rebalancing pool of the head policy, what its next decision
    would do with the demand the inventory measured (kgwe.reconcile.rebalancing.preview)."""
    if not previews:
        return ""
    out = [
        "### Next MIG rebalance",
        "",
        f"With the head policy and the MIG demand measured in {inventory_source}, assumed to hold until the "
        "next decision (the controller decides at most once per `rebalanceInterval`):",
        "",
    ]
    for preview in previews:
        decision = preview.decision
        if decision is None:
            out.append(f"- **{preview.pool}**: {preview.note}")
            continue
        if not decision.taken or decision.plan is None:
            out.append(f"- **{preview.pool}**: no change: {decision.record.message}")
            continue
        out.append(f"- **{preview.pool}**: {decision.event}")
        changes = decision.plan.changes()
        for gpu in changes[:MAX_REBALANCE_GPU_LINES]:
            before = [i.profile for i in gpu.current] if gpu.current is not None else None
            after = _layout_text(gpu.target_profiles)
            out.append(f"  - {gpu.node} GPU {gpu.index}: {_layout_text(before)} → {after}")
        if len(changes) > MAX_REBALANCE_GPU_LINES:
            out.append(f"  - and {len(changes) - MAX_REBALANCE_GPU_LINES} more GPU(s)")
    return "\n".join(out) + "\n"
