"""GPU health as the KGWE agent reports it: per GPU, healthy or not, the reason and since when.

Without NODE: the unhealthy GPUs of every GPU node (and nodes with no report), then a summary line.
With NODE: every GPU of that node. Exit 0 either way; an unknown node exits 1.

examples:
  kgwe health
  kgwe health dgx-h100-03 -o wide     # + the agent's message
  kgwe health -o json
"""

from __future__ import annotations

import argparse
import sys

from kgwe.fleet.cluster import add_cluster_arguments, add_output_argument
from kgwe.fleet.nodes import HEALTH_COLUMNS
from kgwe.fleet.output import render, to_json, to_yaml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("node", nargs="?", metavar="NODE", help="one GPU node: all its GPUs")
    add_output_argument(parser)
    add_cluster_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from kgwe.fleet.cluster import Fleet
    from kgwe.fleet.nodes import health_rows, health_summary
    from kgwe.fleet.nodes_cmd import pick

    fleet = Fleet(args)
    nodes = pick(fleet.gpu_nodes(), [args.node] if args.node else [])
    rows = health_rows(nodes, every_gpu=bool(args.node))
    summary = health_summary(nodes)
    if args.output in ("json", "yaml"):
        doc = {"kind": "GPUHealthList", "summary": summary, "items": rows}
        sys.stdout.write(to_json(doc) if args.output == "json" else to_yaml(doc))
        return 0
    sys.stdout.write(render(rows, HEALTH_COLUMNS, args.output))
    print(
        f"{summary['unhealthyGPUs']} unhealthy of {summary['gpus']} GPUs on {summary['nodes']} GPU node(s)"
        + (f"; {summary['unknownNodes']} node(s) without a health report" if summary["unknownNodes"] else "")
        + (f"; {summary['taintedNodes']} node(s) tainted" if summary["taintedNodes"] else "")
    )
    return 0
