"""Validate a GPUWorkload manifest, then create it, or update it when it exists (like `kubectl apply`).

Every problem of the file is reported with file:line:column and field path before anything is sent; a file
with any error sends nothing. `--policy DIR` checks the workloads against that policy repository too
(scoring profiles, runtimes, budgets), as `kgwe validate --policy` does. `--dry-run=server` has the API
server check and default the objects without persisting them; `--dry-run=client` stops after the local
validation, and with `-o yaml` prints, offline, the objects the controller would create for each workload
(PodGroup, Service, Jobs or Deployments), planned by the controller's own planner with the repository's
runtimes and profiles. A dry run with `--policy DIR` also prints each workload's expected duration and cost
and their P90, from the runtime model the controller commits beside the cost reports
(`reports/models/runtime.json` in DIR or its parent; without one, the prior) at the PricingCatalog's prices,
with the reason (docs/optimizer.md).

examples:
  kgwe submit train.yaml
  kgwe submit train.yaml --dry-run=server -n ml-team
  kgwe submit --dry-run=client -o yaml --policy ~/gpu-policy train.yaml
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from kgwe.errors import KgweError
from kgwe.fleet.cluster import Fleet, add_cluster_arguments
from kgwe.vocab import GPU_WORKLOAD_RESOURCE

DRY_RUN = ("none", "server", "client")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="YAML file with one or more GPUWorkloads")
    parser.add_argument(
        "--dry-run",
        nargs="?",
        const="server",
        default="none",
        choices=DRY_RUN,
        help="server: checked and defaulted by the API server, not persisted; client: validate only",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("yaml",),
        help="with --dry-run=client: print the objects the controller would create",
    )
    parser.add_argument("--policy", metavar="DIR", help="check the workloads against this policy repository")
    add_cluster_arguments(parser)


def manifests(
    path: str, policy_dir: str | None = None, namespace: str | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The GPUWorkloads of `path` as submitted (status dropped) and the warnings; KgweError listing every
    problem when there is any (against the policy repository `policy_dir` too, when given)."""
    from pathlib import Path

    from kgwe.policy.gpu_workload import GPUWorkload
    from kgwe.policy.loader import load_repository

    if not Path(path).is_file():
        raise KgweError(f"{path}: not a file")
    policy = load_repository(policy_dir) if policy_dir else None
    if policy is not None and not policy.ok:
        for d in policy.errors:
            print(f"{policy_dir}/{d}", file=sys.stderr)
        raise KgweError(
            f"{policy_dir}: the policy repository has {len(policy.errors)} error(s); nothing submitted"
        )
    ps = load_repository(path, policy=policy, namespace=namespace)
    problems = [str(d) for d in sorted(ps.errors)]
    for entry in ps.entries:
        line, column = entry.doc.line, entry.doc.column
        if isinstance(entry.obj, GPUWorkload) and not entry.obj.name:
            problems.append(
                f"{entry.file}:{line}:{column}: error: GPUWorkload metadata.name: required to submit"
            )
        if not isinstance(entry.obj, GPUWorkload):
            problems.append(
                f"{entry.file}:{line}:{column}: error: {entry.obj.KIND}: kgwe submit creates GPUWorkloads "
                "only (policy kinds reach the cluster through the policy repository)"
            )
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        raise KgweError(f"{path}: {len(problems)} error(s); nothing submitted")
    # every loaded entry came from a mapping document; the test only tells the type checker so
    bodies = [
        {k: v for k, v in e.doc.data.items() if k != "status"}
        for e in ps.entries
        if isinstance(e.doc.data, Mapping)
    ]
    return bodies, [str(d) for d in sorted(ps.warnings)]


def run(args: argparse.Namespace) -> int:
    if args.output and args.dry_run != "client":
        raise KgweError("-o yaml prints what the controller would create: use it with --dry-run=client")
    bodies, warnings = manifests(args.file, args.policy, getattr(args, "namespace", None))
    for warning in warnings:
        print(warning, file=sys.stderr)
    if args.dry_run == "client":
        if args.output == "yaml":
            sys.stdout.write(planned_yaml(bodies, args.policy, getattr(args, "namespace", None)))
            return 0
        for body in bodies:
            print(f"{GPU_WORKLOAD_RESOURCE}/{body['metadata']['name']} valid (client dry run)")
        _predictions(bodies, args.policy, getattr(args, "namespace", None))
        return 0
    from kgwe.fleet.cluster import Fleet

    fleet = Fleet(args)
    explicit = getattr(args, "namespace", None)
    for body in bodies:
        meta = body["metadata"]
        own = meta.get("namespace")
        if own and explicit and own != explicit:
            raise KgweError(
                f'GPUWorkload {meta["name"]}: its namespace "{own}" differs from --namespace "{explicit}"'
            )
        meta["namespace"] = own or fleet.namespace
    for body in bodies:
        outcome = submit(fleet, body, server_dry_run=args.dry_run == "server")
        print(f"{GPU_WORKLOAD_RESOURCE}/{body['metadata']['name']} {outcome}")
    if args.dry_run == "server":
        _predictions(bodies, args.policy, None)
    return 0


def _predictions(bodies: list[dict[str, Any]], policy_dir: str | None, namespace: str | None) -> None:
    """With a policy repository: each workload's expected duration and cost, their P90 and why."""
    if not policy_dir:
        return
    from pathlib import Path

    from kgwe.cost.pricing import pricebook_from_catalog
    from kgwe.optimizer.admission import predict, predict_cost, shape_of
    from kgwe.optimizer.published import read_published
    from kgwe.optimizer.record import ModelRecordError
    from kgwe.optimizer.runtime import NAME, VERSION, RuntimeModel, expected_seconds
    from kgwe.policy.loader import load_repository

    catalog = load_repository(policy_dir).pricing_catalog()
    book = pricebook_from_catalog(catalog) if catalog is not None else None
    model = None
    try:
        record = read_published(Path(policy_dir), NAME)
    except ModelRecordError as exc:
        print(f"warning: the committed runtime model is not used: {exc}", file=sys.stderr)
        record = None
    if record is not None and record.version == VERSION:
        model = RuntimeModel.from_params(record.params)
    for body in bodies:
        meta = body["metadata"]
        named = {**body, "metadata": {**meta, "namespace": meta.get("namespace") or namespace or "default"}}
        shape = shape_of(named)
        duration = predict(model, shape)
        said = f"expected {_hours(expected_seconds(duration))} (P90 {_hours(duration.at(0.9))})"
        cost = predict_cost(shape, duration, book) if book is not None else None
        if cost is not None:
            said += f", cost {cost.expected} {cost.currency} (P90 {cost.p90})"
            if cost.note:
                said += f" [{cost.note}]"
        else:
            said += ", no cost: the policy repository has no PricingCatalog"
        print(f"  {GPU_WORKLOAD_RESOURCE}/{meta['name']}: {said}: {duration.why}")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:,.0f} min"


def submit(fleet: Fleet, body: dict[str, Any], *, server_dry_run: bool) -> str:
    """Create `body`, or replace the live object's spec, labels and annotations; what happened."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from kgwe.runtime.errors import is_conflict
    from kgwe.vocab import API_GROUP, CRD_VERSION, GPU_WORKLOAD_PLURAL

    custom = client.CustomObjectsApi(fleet.api)
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    coords = {"group": API_GROUP, "version": CRD_VERSION, "namespace": ns, "plural": GPU_WORKLOAD_PLURAL}
    dry = {"dry_run": "All"} if server_dry_run else {}
    suffix = " (server dry run)" if server_dry_run else ""
    crd = f"{GPU_WORKLOAD_PLURAL}.{API_GROUP}"
    with fleet.reading(f"create GPUWorkload {ns}/{name}", crd=crd):
        try:
            custom.create_namespaced_custom_object(body=body, **coords, **dry)
            return "created" + suffix
        except ApiException as exc:
            if not is_conflict(exc):
                raise
    with fleet.reading(f"update GPUWorkload {ns}/{name}", crd=crd):
        live = custom.get_namespaced_custom_object(name=name, **coords)
        live_meta = live.get("metadata") or {}
        same = live.get("spec") == body.get("spec") and all(
            (body["metadata"].get(k) or {}).items() <= (live_meta.get(k) or {}).items()
            for k in ("labels", "annotations")
        )
        if same:
            return "unchanged" + suffix
        new = dict(live)
        new["spec"] = body.get("spec")
        new["metadata"] = {
            **live_meta,
            "labels": {**(live_meta.get("labels") or {}), **(body["metadata"].get("labels") or {})},
            "annotations": {
                **(live_meta.get("annotations") or {}),
                **(body["metadata"].get("annotations") or {}),
            },
        }
        custom.replace_namespaced_custom_object(name=name, body=new, **coords, **dry)
        return "configured" + suffix


OFFLINE_UID = "00000000-0000-0000-0000-000000000000"  # the API server gives the GPUWorkload its uid


def planned_yaml(bodies: list[dict[str, Any]], policy_dir: str | None, namespace: str | None) -> str:
    """The objects the controller would create for each workload's first run, as YAML documents, planned
    offline by the controller's planner. What only the cluster decides is assumed and said on stderr: the
    gang engine (Auto: the native PodGroup), an integer priority's PriorityClass (left out), the uid."""
    import yaml

    from kgwe.policy.admission import ClusterView, resolve_facts
    from kgwe.policy.checks import workload_policy_view
    from kgwe.policy.gpu_workload import GPUWorkload
    from kgwe.policy.loader import PolicySet, load_repository
    from kgwe.policy.runtime_templates import needs_runtime
    from kgwe.policy.workload_resolution import PlanError, gang_phrase
    from kgwe.workloads.plan import plan_children

    policy = workload_policy_view(load_repository(policy_dir)) if policy_dir else None
    if policy is None:
        from pathlib import Path

        policy = workload_policy_view(PolicySet(root=Path(".")))
    docs: list[dict[str, Any]] = []
    for body in bodies:
        wl = GPUWorkload.model_validate(body)
        if not policy_dir and needs_runtime(wl):
            raise KgweError(
                f"{GPU_WORKLOAD_RESOURCE}/{wl.name}: its pod template comes from a WorkloadRuntime of the "
                "policy repository; pass --policy DIR"
            )
        ns = (wl.metadata.namespace if wl.metadata else None) or namespace or "default"
        kueue = wl.spec.gang.backend == "Kueue"
        try:
            facts = resolve_facts(wl, 0, policy, ClusterView(), native=not kueue, kueue=kueue)
        except PlanError as exc:
            hint = (
                "" if policy_dir else "; pass --policy DIR: the repository's runtimes and profiles decide it"
            )
            raise KgweError(f"{GPU_WORKLOAD_RESOURCE}/{wl.name}: {exc} [{exc.reason}]{hint}") from None
        if policy.profiles is None and wl.spec.scheduling_strategy:
            print(
                f"{GPU_WORKLOAD_RESOURCE}/{wl.name}: scoring profile for {wl.spec.scheduling_strategy} not "
                "known without --policy; left out",
                file=sys.stderr,
            )
        notes = [
            gang_phrase(facts.gang_backend, wl.spec.total_pods, wl.spec.is_batch)
            + (
                " (Auto: assumed native PodGroups)"
                if wl.spec.gang.backend == "Auto" and facts.gang_backend != "None"
                else ""
            )
        ]
        if isinstance(wl.spec.priority, int):
            notes.append(
                f"priority {wl.spec.priority}: the cluster's PriorityClass at or below it, left out here"
            )
        if facts.runtime_name:
            notes.append(f"runtime {facts.runtime_name}")
        print(f"{GPU_WORKLOAD_RESOURCE}/{wl.name} in {ns}: " + "; ".join(notes), file=sys.stderr)
        docs.extend(plan_children(wl, ns, OFFLINE_UID, facts))
    return yaml.safe_dump_all(docs, sort_keys=False, width=100)
