"""Validate a GPUWorkload manifest, then create it, or update it when it exists (like `kubectl apply`).

Every problem of the file is reported with file:line:column and field path before anything is sent; a file
with any error sends nothing. `--dry-run=server` has the API server check and default the objects without
persisting them; `--dry-run=client` stops after the local validation.

examples:
  kgwe submit train.yaml
  kgwe submit train.yaml --dry-run=server -n ml-team
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kgwe.errors import KgweError
from kgwe.fleet.cluster import add_cluster_arguments

DRY_RUN = ("none", "server", "client")
RESOURCE = "gpuworkload.kgwe.nvidia.io"


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
    add_cluster_arguments(parser)


def manifests(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The GPUWorkloads of `path` as submitted (status dropped) and the warnings; KgweError listing every
    problem when there is any."""
    from pathlib import Path

    from kgwe.policy.gpu_workload import GPUWorkload
    from kgwe.policy.loader import load_repository

    if not Path(path).is_file():
        raise KgweError(f"{path}: not a file")
    ps = load_repository(path)
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
    bodies = [{k: v for k, v in dict(e.doc.data).items() if k != "status"} for e in ps.entries]  # type: ignore[call-overload]
    return bodies, [str(d) for d in sorted(ps.warnings)]


def run(args: argparse.Namespace) -> int:
    bodies, warnings = manifests(args.file)
    for warning in warnings:
        print(warning, file=sys.stderr)
    if args.dry_run == "client":
        for body in bodies:
            print(f"{RESOURCE}/{body['metadata']['name']} valid (client dry run)")
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
        print(f"{RESOURCE}/{body['metadata']['name']} {outcome}")
    return 0


def submit(fleet: Any, body: dict[str, Any], *, server_dry_run: bool) -> str:
    """Create `body`, or replace the live object's spec, labels and annotations; what happened."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from kgwe import API_GROUP
    from kgwe.fleet.cluster import CRD_VERSION, WORKLOAD_PLURAL

    custom = client.CustomObjectsApi(fleet.api)
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    coords = {"group": API_GROUP, "version": CRD_VERSION, "namespace": ns, "plural": WORKLOAD_PLURAL}
    dry = {"dry_run": "All"} if server_dry_run else {}
    suffix = " (server dry run)" if server_dry_run else ""
    crd = f"{WORKLOAD_PLURAL}.{API_GROUP}"
    with fleet.reading(f"create GPUWorkload {ns}/{name}", crd=crd):
        try:
            custom.create_namespaced_custom_object(body=body, **coords, **dry)
            return "created" + suffix
        except ApiException as exc:
            if exc.status != 409:
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
