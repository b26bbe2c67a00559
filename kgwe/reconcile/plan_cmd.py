"""Show what a pull request would do to the cluster, as Markdown (for a PR comment).

Compares two revisions of the policy repository (clean exports of the commits, never the working tree),
renders both against one GPU inventory, and reports objects added/changed/removed, MIG layout changes per
pool (GPUs repartitioned, nodes that would need a drain), and policy changes (scheduler and scoring,
budgets and quotas). Works offline: the inventory comes from --inventory, else --kubeconfig, else the
snapshot the controller commits under reports/, else the repository's own GPUInventory.

What the controller wrote (the inventory snapshot, the demand record, the audit log) is read from the
base, never from the head: the pull request being planned must not choose the facts it is planned on. A
pull request that changes anything under the report folders, or the repository's own GPUInventory, is
flagged at the top of the plan and on stderr.

A "Next MIG rebalance" section shows what the next demand-driven rebalance of each pool with
`rebalanceInterval` would do, from the MIG demand the inventory snapshot measured (docs/mig-rebalancing.md);
it never changes the exit status.

The report ends with where the audit log is (the newest `<reports>/audit/<YYYY-MM>.jsonl` at base): what the
controller wrote to the cluster for each applied commit, and who authored it (docs/audit.md).

When scoring profiles, MIG strategies, budgets or prices change, an impact section replays the recorded
demand (demand-record.json under reports/, or --demand FILE) through the base and the head policy
(kgwe.impact); a missing or unusable record only adds a note saying why. --no-impact skips it.

Exit status: 0 nothing would change, 2 something would change, 1 error (like `flux diff`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import git

from kgwe.errors import KgweError
from kgwe.gitops.source import (
    MAX_EXPORT_FILES,
    GitSourceError,
    TreeEntry,
    changed_paths,
    export_commit,
    list_tree,
    resolve_local,
)
from kgwe.reconcile.prplan import PlanReport, diff_layouts, diff_objects, diff_policies, markdown
from kgwe.vocab import DEFAULT_REPORTS_PATH

if TYPE_CHECKING:  # loaded when the command runs (`kgwe --help` stays light)
    from kgwe.policy.inventory import GPUInventory
    from kgwe.policy.policy_set import PolicySet

SNAPSHOT_NAME = "gpu-inventory.yaml"
DEMAND_NAME = "demand-record.json"  # kgwe.impact.record.RECORD_NAME, kept here so `import` stays light
IMPACT_SEED = 42
OWN_INVENTORY = "the repository's GPUInventory"  # where the inventory came from, as the plan says it


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", default=".", help="policy folder inside the repository")
    parser.add_argument("--base", required=True, help="base revision (branch, tag or commit)")
    parser.add_argument("--head", required=True, help="head revision (branch, tag or commit)")
    parser.add_argument("--repo", default=".", help="the Git repository (default: current directory)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--inventory", help="GPUInventory YAML file to plan against")
    source.add_argument("--kubeconfig", help="read the inventory from this cluster")
    parser.add_argument("--repository-name", default="local", help="PolicyRepository name for labels")
    parser.add_argument("--output", help="also write the Markdown report to this file")
    parser.add_argument(
        "--demand", help="demand record to replay (default: demand-record.json under reports/ at base)"
    )
    parser.add_argument("--no-impact", action="store_true", help="skip the impact replay of recorded demand")


def run(args: argparse.Namespace) -> int:
    from kgwe.policy.loader import load_repository

    try:
        repo = git.Repo(args.repo, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise KgweError(f"{args.repo} is not inside a Git repository") from exc
    base_sha, head_sha = resolve_local(repo, args.base), resolve_local(repo, args.head)
    sub = None if args.path.strip("/") in ("", ".") else args.path.strip("/")
    with tempfile.TemporaryDirectory(prefix="kgwe-plan-") as tmp:
        head_root = export_commit(repo, head_sha, Path(tmp) / "head", sub)
        head_ps = load_repository(head_root)
        if not head_ps.ok:
            for d in head_ps.errors:
                print(f"{d.file}:{d.line}:{d.column}: {d.message}", file=sys.stderr)
            count = len(head_ps.errors)
            raise KgweError(f"head revision {args.head} has {count} policy error(s); nothing planned")
        notes: list[str] = []
        try:
            base_root = export_commit(repo, base_sha, Path(tmp) / "base", sub)
            base_ps = load_repository(base_root)
            if not base_ps.ok:
                notes.append(f"base revision {args.base} has policy errors; its objects count as absent")
        except KgweError:
            base_ps = None
            notes.append(f"{args.path} does not exist at base {args.base}; everything is new")
        inventory, inventory_source = _inventory(args, repo, base_sha, head_ps)
        report = plan_report(base_ps, head_ps, inventory, repository=args.repository_name)
        report.notes += notes
        report.warnings += _steering(args, repo, base_sha, head_sha, base_ps, head_ps, inventory_source)
        impact = None
        if not args.no_impact:
            impact = _impact(args, repo, base_sha, base_ps, head_ps, inventory, report)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    text = markdown(report, base=args.base, head=args.head, inventory_source=inventory_source)
    if impact:
        text += "\n" + impact
    if inventory is not None:  # informational: the next rebalance happens whether or not the PR merges
        text += _next_rebalance(head_ps, inventory, inventory_source)
    text += "\n" + _audit_note(args, repo, base_sha)
    sys.stdout.write(text)
    if args.output:
        Path(args.output).write_text(text)
    return 2 if report.has_changes else 0


def plan_report(
    base_ps: PolicySet | None,
    head_ps: PolicySet,
    inventory: GPUInventory | None,
    *,
    repository: str = "local",
) -> PlanReport:
    """The report for two loaded policy sets against one inventory (pure apart from rendering)."""
    from kgwe.render.render import Rendered, RenderOptions, render

    options = RenderOptions(repository=repository)
    head = render(head_ps, inventory, options=options)
    base = render(base_ps, inventory, options=options) if base_ps is not None and base_ps.ok else Rendered()
    report = PlanReport(rendered=(base, head))
    diff_objects(base.objects, head.objects, report)
    diff_policies(base_ps.objects() if base_ps is not None else [], head_ps.objects(), report)
    node_pool: dict[str, str] = {}
    drain: dict[str, bool] = {}
    busy: dict[str, set[int]] = {}
    if inventory is not None:
        for strategy in sorted(head_ps.mig_strategies, key=lambda s: s.name):
            drain[strategy.name] = strategy.spec.rollout.drain
            for node in inventory.spec.nodes:
                if strategy.selects(node.labels):
                    node_pool.setdefault(node.name, strategy.name)
        for node in inventory.spec.nodes:
            busy[node.name] = {i for i, held in enumerate(node.in_use()) if held}
    diff_layouts(base.layouts, head.layouts, node_pool, busy, drain, report)
    if inventory is None:
        report.notes.append("no GPU inventory found: MIG layouts were not planned (pass --inventory)")
    return report


def _impact(
    args: argparse.Namespace,
    repo: git.Repo,
    base_sha: str,
    base_ps: PolicySet | None,
    head_ps: PolicySet,
    inventory: GPUInventory | None,
    report: PlanReport,
) -> str | None:
    """The impact section, or None with a note saying why it was skipped (the exit code never changes)."""
    from kgwe.impact.record import DemandRecordError, check_inventory, decode, gpus_of
    from kgwe.impact.replay import compare
    from kgwe.impact.report import markdown as impact_markdown
    from kgwe.impact.report import policy_view, wants_impact

    if not wants_impact(report.policy_changes):
        return None
    if inventory is None or base_ps is None or not base_ps.ok:
        report.notes.append("impact skipped: it needs an inventory and a valid base revision")
        return None
    try:
        data, source = _demand(args, repo, base_sha)
        if data is None:
            report.notes.append(
                f"impact skipped: no {DEMAND_NAME} under reports/ at base (the controller commits one on the "
                "report schedule) and no --demand FILE"
            )
            return None
        record = decode(data, where=source)
        check_inventory(record, gpus_of([(n.product, n.gpus) for n in inventory.spec.nodes]))
    except DemandRecordError as exc:
        report.notes.append(f"impact skipped: {exc}")
        return None
    if report.rendered is None:  # plan_report renders both revisions; a report without them has no impact
        return None
    base_render, head_render = report.rendered
    base = policy_view(base_ps, base_render, inventory)
    head = policy_view(head_ps, head_render, inventory)
    before, after = compare(record, base, head, seed=IMPACT_SEED)
    return impact_markdown(record, source, before, after, IMPACT_SEED)


def _next_rebalance(head_ps: PolicySet, inventory: GPUInventory, inventory_source: str) -> str:
    from datetime import UTC, datetime

    from kgwe.reconcile.prplan import rebalance_markdown
    from kgwe.reconcile.rebalancing import preview

    section = rebalance_markdown(
        preview(head_ps.mig_strategies, inventory, datetime.now(UTC)), inventory_source
    )
    return "\n" + section if section else ""


def _report_folders(args: argparse.Namespace) -> tuple[str, ...]:
    """Where the controller's reports may be: `reports/` at the top, or beside the policy folder."""
    sub = args.path.strip("/")
    return (DEFAULT_REPORTS_PATH, *([f"{sub}/{DEFAULT_REPORTS_PATH}"] if sub not in ("", ".") else []))


def _steering(
    args: argparse.Namespace,
    repo: git.Repo,
    base_sha: str,
    head_sha: str,
    base_ps: PolicySet | None,
    head_ps: PolicySet,
    inventory_source: str,
) -> list[str]:
    """What the pull request changes of the facts a plan is made on: files under the report folders (only
    KGWE's controller writes there; this plan reads them from the base) and, when the plan is made on it,
    the repository's own GPUInventory (not listed among the policy changes)."""
    folders = tuple(f"{folder}/" for folder in _report_folders(args))
    touched = sorted(p for p in changed_paths(repo, base_sha, head_sha) if p.startswith(folders))
    warnings = []
    if touched:
        shown = ", ".join(f"`{p}`" for p in touched[:5]) + (
            f" and {len(touched) - 5} more" if len(touched) > 5 else ""
        )
        warnings.append(
            f"this pull request changes {len(touched)} file(s) under the reports folder, which only KGWE's "
            f"controller writes: {shown}. This plan reads the inventory snapshot, the demand record and the "
            f"audit log from the base `{args.base}`, not from the pull request."
        )
    base_inventory = base_ps.inventory() if base_ps is not None and base_ps.ok else None
    head_inventory = head_ps.inventory() if inventory_source == OWN_INVENTORY else None
    if head_inventory is not None and (
        base_inventory is None or base_inventory.to_yaml_dict() != head_inventory.to_yaml_dict()
    ):
        warnings.append(
            f"this pull request changes GPUInventory/{head_inventory.name}, the fleet this plan is made on "
            "(the controller has committed no snapshot): node counts and drains follow the pull request's "
            "own account of the fleet."
        )
    return warnings


def _audit_note(args: argparse.Namespace, repo: git.Repo, base_sha: str) -> str:
    """Where the audit log is: the newest month's file under the report folders at base (kgwe.audit.log)."""
    from kgwe.audit.log import is_log_path, plan_note

    try:
        entries = list_tree(repo, base_sha, _report_folders(args), limit=MAX_EXPORT_FILES)
    except GitSourceError:
        entries = []
    logs = sorted((e.path for e in entries if is_log_path(e.path)), key=lambda p: p.rpartition("/")[2])
    return plan_note(logs[-1] if logs else None)


def _demand(args: argparse.Namespace, repo: git.Repo, base_sha: str) -> tuple[bytes | None, str]:
    from kgwe.impact.record import MAX_RECORD_BYTES, DemandRecordError

    if args.demand:
        path = Path(args.demand)
        try:
            with path.open("rb") as fh:
                return fh.read(MAX_RECORD_BYTES + 1), f"`{args.demand}`"
        except OSError as exc:
            raise DemandRecordError(f"cannot read demand record {path}: {exc.strerror}") from None
    try:
        entries = list_tree(repo, base_sha, _report_folders(args), limit=MAX_EXPORT_FILES)
    except GitSourceError as exc:
        raise DemandRecordError(str(exc)) from None
    found = [e for e in entries if e.path.endswith("/" + DEMAND_NAME)]
    if not found:
        return None, ""
    # the controller's record before a shipped one
    found.sort(key=lambda e: not e.path.startswith(DEFAULT_REPORTS_PATH + "/"))
    where = f"`{found[0].path}` at base"
    if found[0].size_bytes > MAX_RECORD_BYTES:
        size = found[0].size_bytes
        raise DemandRecordError(f"{where}: {size} bytes is over the {MAX_RECORD_BYTES}-byte bound; refused")
    return (repo.commit(base_sha).tree / found[0].path).data_stream.read(), where


def _inventory(
    args: argparse.Namespace, repo: git.Repo, base_sha: str, head_ps: PolicySet
) -> tuple[GPUInventory | None, str]:
    from kgwe.policy import GPUInventory

    if args.inventory:
        return _read_inventory_file(Path(args.inventory)), f"`{args.inventory}`"
    if args.kubeconfig:
        from kgwe.cluster.client import api_client
        from kgwe.cluster.inventory import inventory_document, read_gpu_nodes_and_unscheduled
        from kgwe.reconcile.rebalancing import live_demand
        from kgwe.reconcile.repository import live_mig_configs
        from kgwe.render.render import RenderOptions
        from kgwe.runtime.kube import KubeCluster

        api = api_client(args.kubeconfig)
        options = RenderOptions()
        configs = live_mig_configs(KubeCluster(api), options.mig_namespace, options.mig_config_name)
        facts, unscheduled = read_gpu_nodes_and_unscheduled(api)
        inventory = GPUInventory.model_validate(
            inventory_document(facts, name="cluster", mig_configs=configs)
        )
        inventory.spec.mig_demand = live_demand(head_ps.mig_strategies, inventory, unscheduled)
        return inventory, "live cluster"
    snapshots = [
        e
        for e in list_tree(repo, base_sha, (DEFAULT_REPORTS_PATH,), limit=MAX_EXPORT_FILES)
        if e.path.endswith("/" + SNAPSHOT_NAME) or e.path == SNAPSHOT_NAME
    ]
    if snapshots:
        return _parse_inventory(_blob(repo, base_sha, snapshots[0]), snapshots[0].path), (
            f"snapshot `{snapshots[0].path}` at base"
        )
    own = head_ps.inventory()
    return own, OWN_INVENTORY if own is not None else "none"


def _blob(repo: git.Repo, sha: str, entry: TreeEntry) -> bytes:
    """A file of commit `sha`, read only once its size is known to be within the YAML bound."""
    from kgwe.policy.yaml_source import MAX_TEXT_BYTES

    if entry.size_bytes > MAX_TEXT_BYTES:
        size = entry.size_bytes
        raise KgweError(f"{entry.path}: {size} bytes is over the {MAX_TEXT_BYTES}-byte bound; refused")
    return bytes((repo.commit(sha).tree / entry.path).data_stream.read())


def _read_inventory_file(path: Path) -> GPUInventory:
    from kgwe.policy.yaml_source import MAX_TEXT_BYTES

    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_TEXT_BYTES + 1)
    except OSError as exc:
        raise KgweError(f"cannot read inventory {path}: {exc.strerror}") from exc
    return _parse_inventory(data, str(path))


def _parse_inventory(text: bytes, where: str) -> GPUInventory:
    from pydantic import ValidationError

    from kgwe.policy import GPUInventory
    from kgwe.policy.yaml_source import YamlSyntaxError, load_all

    try:
        docs = [d for d in load_all(text) if d]
    except YamlSyntaxError as exc:
        raise KgweError(f"{where}:{exc.line}:{exc.column}: {exc}") from None
    found = [d for d in docs if isinstance(d, dict) and d.get("kind") == "GPUInventory"]
    if not found:
        raise KgweError(f"{where} holds no GPUInventory")
    try:
        return GPUInventory.model_validate(found[0])
    except ValidationError as exc:
        first = exc.errors()[0]
        location = ".".join(map(str, first["loc"]))
        raise KgweError(f"{where}: invalid GPUInventory at {location}: {first['msg']}") from exc
