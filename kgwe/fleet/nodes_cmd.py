"""Every GPU node: product, GPU count, whole GPUs / MIG instances / shares requested of those offered, the MIG
config and its state, the topology class, GPU health.

examples:
  kgwe nodes
  kgwe nodes -o wide          # + MIG layout, schedulable, GPU pods
  kgwe nodes NODE -o wide     # + the node's GPUs and the links between them (agent's topology annotation)
  kgwe nodes -o json          # every field, per MIG profile
  kubectl kgwe nodes --context prod
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from kgwe.errors import KgweError
from kgwe.fleet.cluster import add_cluster_arguments, add_output_argument
from kgwe.fleet.nodes import NODE_COLUMNS
from kgwe.fleet.output import render
from kgwe.policy.diagnostics import did_you_mean


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NODE", help="only these GPU nodes")
    add_output_argument(parser)
    add_cluster_arguments(parser)


def pick(nodes: list[dict[str, Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """The named GPU nodes; an unknown name is an error with a 'did you mean'."""
    if not names:
        return nodes
    known = {n["metadata"]["name"]: n for n in nodes}
    for name in names:
        if name not in known:
            raise KgweError(f'no GPU node "{name}"{did_you_mean(name, known)}')
    return [known[n] for n in dict.fromkeys(names)]


def run(args: argparse.Namespace) -> int:
    from kgwe.fleet.cluster import Fleet
    from kgwe.fleet.nodes import gpu_topology, gpu_topology_text, node_rows, policy_change, policy_change_text

    fleet = Fleet(args)
    nodes = pick(fleet.gpu_nodes(), args.names)
    requests, pods = fleet.gpu_pods()
    rows = node_rows(nodes, requests, pods)
    if not rows and args.output in ("table", "wide"):
        print("no GPU nodes (label nvidia.com/gpu.present=true)", file=sys.stderr)
        return 0
    named = bool(args.names)  # the GPUs and links of the nodes asked for by name
    if named and args.output in ("json", "yaml"):
        by_name = {n["metadata"]["name"]: n for n in nodes}
        rows = [
            {**row, **gpu_topology(by_name[row["name"]]), **policy_change(by_name[row["name"]])}
            for row in rows
        ]
    sys.stdout.write(render(rows, NODE_COLUMNS, args.output, kind="GPUNodeList"))
    if named and args.output == "wide":
        for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
            sys.stdout.write("\n" + gpu_topology_text(node) + policy_change_text(node))
    return 0
