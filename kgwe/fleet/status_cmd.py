"""The fleet at a glance: PolicyRepositories (Ready, revision, MIG rollout per pool), KGWE's components,
GPUs allocated / idle / unhealthy, budgets near their limit.

examples:
  kgwe status
  kgwe status -o json
"""

from __future__ import annotations

import argparse
import sys

from kgwe.fleet.cluster import add_cluster_arguments, add_output_argument
from kgwe.fleet.output import to_json, to_yaml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_output_argument(parser)
    add_cluster_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from kgwe.fleet.cluster import Fleet
    from kgwe.fleet.nodes import node_rows
    from kgwe.fleet.status import status_document, status_text

    fleet = Fleet(args)
    repositories = fleet.repositories()
    nodes = fleet.gpu_nodes()
    requests, pods = fleet.gpu_pods()
    doc = status_document(
        repositories,
        fleet.components(),
        node_rows(nodes, requests, pods),
        fleet.budget_events(),
        fleet.budget_quotas(),
    )
    if args.output == "json":
        sys.stdout.write(to_json(doc))
    elif args.output == "yaml":
        sys.stdout.write(to_yaml(doc))
    else:
        sys.stdout.write(status_text(doc, wide=args.output == "wide"))
    return 0
