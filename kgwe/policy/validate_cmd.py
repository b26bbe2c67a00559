"""Check a policy repository (or one manifest): every KGWE kind, all problems at once, each with
file:line:column and a field path. Exit 0 when valid (warnings allowed), 1 when anything is wrong."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import orjson

from kgwe.policy.loader import PolicySet, load_repository


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", default=".", help="repository directory or YAML file (default: .)")
    parser.add_argument("--output", "-o", choices=("text", "json"), default="text", help="report format")


def summary(ps: PolicySet) -> dict:
    kinds = Counter(e.obj.kind for e in ps.entries)
    return {
        "path": str(ps.root),
        "valid": ps.ok,
        "files": ps.files,
        "objects": dict(sorted(kinds.items())),
        "errors": [d.to_dict() for d in ps.errors],
        "warnings": [d.to_dict() for d in ps.warnings],
    }


def run(args: argparse.Namespace) -> int:
    ps = load_repository(args.path)
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
