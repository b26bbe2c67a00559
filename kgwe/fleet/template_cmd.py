"""Write a commented GPUWorkload manifest of one workload type; it validates as written.

examples:
  kgwe template                                  # Training, to stdout
  kgwe template --type Inference --name chat -o chat.yaml
  kgwe template --type DistributedTraining | kgwe validate /dev/stdin
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.fleet.template import TYPES, template


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--type",
        "-t",
        dest="workload_type",
        default="Training",
        metavar="TYPE",
        help=f"workload type: {', '.join(TYPES)} (default: Training)",
    )
    parser.add_argument("--name", help="metadata.name (default: my-<type>)")
    parser.add_argument("-n", "--namespace", help="metadata.namespace (default: left to kgwe submit)")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE instead of stdout (not overwritten)"
    )


def run(args: argparse.Namespace) -> int:
    from kgwe.policy.diagnostics import did_you_mean

    if args.workload_type not in TYPES:
        hint = did_you_mean(args.workload_type, TYPES)
        raise KgweError(f'unknown workload type "{args.workload_type}"{hint}; known: {", ".join(TYPES)}')
    text = template(args.workload_type, name=args.name, namespace=args.namespace)
    if not args.output:
        sys.stdout.write(text)
        return 0
    path = Path(args.output)
    try:
        with path.open("x") as fh:
            fh.write(text)
    except FileExistsError:
        raise KgweError(f"{path} exists; not overwritten") from None
    except OSError as exc:
        raise KgweError(f"cannot write {path}: {exc.strerror}") from None
    print(f"wrote {path} ({args.workload_type}); check it with `kgwe validate {path}`", file=sys.stderr)
    return 0
