"""kgwe optimize report: each optimizer model, what it predicts, and its held-out scores.

From the cost store (`--db`, the controller's database): every model's newest record — when it was fitted,
on what window and how many samples, and its scores on data held out of that fit. With `--traces`: each
model evaluated now on the public traces (KGWE_DATA or `--data`), against the rule KGWE uses without it —
the figures bench/optimizer.py prints.

examples:
  kgwe optimize report --db postgresql://kgwe@db/kgwe
  kgwe optimize report --traces --quick
  kgwe optimize report --traces --model runtime --output json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kgwe.errors import KgweError
from kgwe.optimizer.registry import MODELS, Evaluation, entry, load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    report = sub.add_parser("report", help="each model's held-out scores")
    report.add_argument("--db", default=None, help="cost database URL or SQLite path: the fitted models")
    report.add_argument("--traces", action="store_true", help="evaluate every model on the public traces")
    report.add_argument("--data", default=None, metavar="DIR", help="the public traces (default KGWE_DATA)")
    report.add_argument("--quick", action="store_true", help="with --traces: smaller evaluations")
    report.add_argument("--model", action="append", default=None, help="only this model (repeatable)")
    report.add_argument("--output", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    names = args.model or [m.name for m in MODELS]
    chosen = [entry(n) for n in names]
    if not args.db and not args.traces:
        raise KgweError("say where the scores come from: --db (the fitted models) and/or --traces")
    out: dict[str, Any] = {}
    if args.db:
        from kgwe.cost.store import CostStore
        from kgwe.optimizer.store import ModelStore

        store = CostStore(args.db)
        try:
            store.migrate()
            models = ModelStore(store)
            stored = {m.name: models.latest(m.name) for m in chosen}
        finally:
            store.close()
        out["fitted"] = {n: (json.loads(r.to_json()) if r else None) for n, r in stored.items()}
        if args.output == "text":
            print("fitted on this cluster's records:")
            for m in chosen:
                record = stored[m.name]
                print(f"  {record.summary() if record else f'{m.name}: not fitted yet'}")
                for note in record.notes if record else ():
                    print(f"    note: {note}")
    if args.traces:
        evaluations = evaluate(chosen_names=[m.name for m in chosen], data=args.data, quick=args.quick)
        out["traces"] = {e.model: dict(e.figures) for e in evaluations}
        if args.output == "text":
            for e in evaluations:
                print(f"{e.model} on the public traces (held out):")
                for line in e.lines:
                    print(f"  {line}")
    if args.output == "json":
        json.dump(out, sys.stdout, indent=2, sort_keys=True)
        print()
    return 0


def evaluate(chosen_names: list[str], data: str | None = None, quick: bool = False) -> list[Evaluation]:
    """Every named model with an evaluator, scored on the public traces (bench/optimizer.py uses this)."""
    from kgwe.resources import shared_data_dir

    data_dir = Path(data) if data else shared_data_dir()
    if not data_dir.is_dir():
        raise KgweError(f"--data {data_dir}: not a directory")
    out = []
    for name in chosen_names:
        m = entry(name)
        if m.evaluate is None:
            continue
        result = load(m.evaluate)(data_dir, quick)
        if not isinstance(result, Evaluation):
            raise KgweError(f"optimizer model {name}: its evaluator returned {type(result).__name__}")
        out.append(result)
    return out
