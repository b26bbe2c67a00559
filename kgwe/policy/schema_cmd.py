"""Write one JSON Schema per KGWE kind (for editors and CI), with --crds the CRDs of the cluster kinds, with
--docs the field tables of the kinds' reference pages (docs/spec/), and with --admission the routing
MutatingAdmissionPolicy the chart renders (kgwe.admission.policy). Without --out the schemas are printed as
one JSON object keyed by kind."""

from __future__ import annotations

import argparse
import sys

from kgwe.policy.models import KINDS
from kgwe.policy.schema_export import dumps, json_schema, write_crds, write_routing_policy, write_schemas
from kgwe.policy.spec_tables import MissingMarkers, write_pages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", help="write <kind>.schema.json files into DIR")
    parser.add_argument(
        "--crds", metavar="DIR", help="also write the CRDs (PolicyRepository, GPUWorkload) into DIR"
    )
    parser.add_argument(
        "--docs", metavar="DIR", help="also regenerate the field tables of the <kind>.md pages in DIR"
    )
    parser.add_argument(
        "--admission",
        metavar="FILE",
        help="also write the specs of the routing MutatingAdmissionPolicy and its binding into FILE",
    )


def run(args: argparse.Namespace) -> int:
    if args.out:
        for path in write_schemas(args.out):
            print(f"wrote {path}")
    else:
        sys.stdout.write(dumps({kind: json_schema(model) for kind, model in KINDS.items()}))
    if args.crds:
        for path in write_crds(args.crds):
            print(f"wrote {path}")
    if args.docs:
        try:
            pages = write_pages(args.docs)
        except (MissingMarkers, OSError) as exc:
            print(f"kgwe schema --docs: {exc}", file=sys.stderr)
            return 1
        for path in pages:
            print(f"wrote {path}")
    if args.admission:
        print(f"wrote {write_routing_policy(args.admission)}")
    return 0
