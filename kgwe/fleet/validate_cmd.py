"""Check a policy repository (or one manifest): every KGWE kind, all problems at once, each with
file:line:column and a field path. Exit 0 when valid (warnings allowed), 1 when anything is wrong.

GPUWorkloads are checked for everything the controller would refuse them for: against the repository's own
policy, or the repository named by `--policy`; what only the cluster knows (PriorityClasses, nodes, gang
engines, namespaces) is a warning, and an error with `--cluster`, which reads it (and, without a policy
repository, the policy the cluster runs) through the kubeconfig.

examples:
  kgwe validate sample-repo
  kgwe validate --policy ~/gpu-policy train.yaml
  kgwe validate --cluster -n ml-team train.yaml
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter

import orjson

from kgwe.fleet.cluster import Fleet, add_cluster_arguments
from kgwe.policy.loader import PolicySet, load_repository
from kgwe.vocab import KGWE_NAMESPACE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", default=".", help="repository directory or YAML file (default: .)")
    parser.add_argument("--output", "-o", choices=("text", "json"), default="text", help="report format")
    parser.add_argument(
        "--policy",
        metavar="DIR",
        help="check GPUWorkloads against this policy repository (profiles, runtimes)",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="also check GPUWorkloads against the cluster (PriorityClasses, nodes, gang engines, namespaces)",
    )
    parser.add_argument(
        "--policy-namespace",
        default=KGWE_NAMESPACE,
        help="with --cluster: where KGWE's rendered policy lives (default: %(default)s)",
    )
    add_cluster_arguments(parser)


def summary(ps: PolicySet) -> dict[str, object]:
    kinds = Counter(e.obj.kind for e in ps.entries)
    return {
        "path": str(ps.root),
        "valid": ps.ok,
        "files": ps.files,
        "objects": dict(sorted(kinds.items())),
        "errors": [d.to_dict() for d in ps.errors],
        "warnings": [d.to_dict() for d in ps.warnings],
    }


def load(args: argparse.Namespace) -> PolicySet:
    """The path loaded and checked with what --policy and --cluster add; the policy repository's own
    problems are reported too, under its path."""
    policy = load_repository(args.policy) if getattr(args, "policy", None) else None
    cluster = cluster_policy = None
    namespace = getattr(args, "namespace", None)
    if getattr(args, "cluster", False):
        from kgwe.runtime.kube import KubeCluster  # the Kubernetes client: loaded only for --cluster
        from kgwe.workloads import cluster_facts

        fleet = Fleet(args)
        api = KubeCluster(fleet.api)
        namespace = fleet.namespace
        with fleet.reading("read the cluster's GPU nodes, PriorityClasses and quotas"):
            cluster = dataclasses.replace(
                cluster_facts.cluster_view(api, namespaces_and_quotas=True),
                kgwe_namespace=args.policy_namespace,  # no GPUWorkload runs there
            )
            cluster_policy = cluster_facts.policy_view(api, args.policy_namespace)
    ps = load_repository(
        args.path, policy=policy, cluster=cluster, cluster_policy=cluster_policy, namespace=namespace
    )
    if policy is not None:
        base = str(policy.root).rstrip("/")
        ps.diagnostics.extend(
            dataclasses.replace(d, file=f"{base}/{d.file}" if policy.root.is_dir() else base)
            for d in policy.diagnostics
        )
        ps.diagnostics.sort()
    return ps


def run(args: argparse.Namespace) -> int:
    ps = load(args)
    if args.output == "json":
        sys.stdout.write(orjson.dumps(summary(ps), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0 if ps.ok else 1
    for d in sorted(ps.diagnostics):
        print(d)
    kinds = Counter(e.obj.kind for e in ps.entries)
    listing = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no objects"
    n_err, n_warn = len(ps.errors), len(ps.warnings)
    verdict = "valid" if ps.ok else "INVALID"
    print(f"{ps.root}: {verdict} — {ps.files} files, {listing}; {n_err} error(s), {n_warn} warning(s)")
    return 0 if ps.ok else 1
