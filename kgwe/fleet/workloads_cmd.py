"""GPUWorkloads with their phase, GPUs, nodes, age and cost so far (from the workload's status).

examples:
  kgwe workloads                  # the current namespace
  kgwe workloads -A -o wide       # every namespace, + GPU-hours, team, retries, gang backend
  kgwe workloads train-llm -o yaml
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from kgwe.errors import KgweError
from kgwe.fleet.cluster import add_cluster_arguments, add_output_argument
from kgwe.fleet.output import render
from kgwe.fleet.workloads import WORKLOAD_COLUMNS
from kgwe.policy.diagnostics import did_you_mean


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these GPUWorkloads")
    add_output_argument(parser)
    add_cluster_arguments(parser, all_namespaces=True)


def run(args: argparse.Namespace) -> int:
    from kgwe.fleet.cluster import Fleet
    from kgwe.fleet.workloads import workload_rows

    fleet = Fleet(args)
    namespace = None if args.all_namespaces else fleet.namespace
    objs = fleet.workloads(namespace)
    if args.names:
        known = {o["metadata"]["name"]: o for o in objs}
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        for name in args.names:
            if name not in known:
                raise KgweError(f'no GPUWorkload "{name}" in {where}{did_you_mean(name, known)}')
        objs = [o for o in objs if o["metadata"]["name"] in args.names]
    rows = workload_rows(objs, datetime.now(UTC))
    if not rows and args.output in ("table", "wide"):
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        print(f"no GPUWorkloads in {where}", file=sys.stderr)
        return 0
    sys.stdout.write(render(rows, WORKLOAD_COLUMNS, args.output, kind="GPUWorkloadList"))
    return 0
