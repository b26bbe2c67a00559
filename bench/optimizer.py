"""The workload optimizer on public traces: every model of kgwe.optimizer.registry scored on data it was
not fitted on, beside the rule KGWE uses without it (docs/optimizer.md says what each figure compares).

Each model's evaluator prints its lines; the last line is one JSON object merging every model's figures
(decision 1, MIG rebalancing ahead of demand: rebalance_*; decision 3, runtime and cost at admission:
runtime_*, queue_*; the other models add their own keys).
"""

from __future__ import annotations

import argparse
import json
import time

from kgwe.optimizer.optimize_cmd import evaluate
from kgwe.optimizer.registry import MODELS


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller evaluations (minutes, not tens)")
    parser.add_argument("--model", action="append", default=None, help="only this model (repeatable)")
    parser.add_argument("--data", default=None, help="the public traces (default KGWE_DATA / shared/data)")
    args = parser.parse_args()
    t0, c0 = time.perf_counter(), time.process_time()
    figures: dict[str, float | int] = {}
    for m in args.model or [m.name for m in MODELS]:
        t = time.perf_counter()
        (result,) = evaluate([m], args.data, args.quick) or [None]
        if result is None:
            continue
        print(f"{result.model}:")
        for line in result.lines:
            print(f"  {line}")
        print(f"  ({time.perf_counter() - t:.1f} s)")
        clash = set(figures) & set(result.figures)
        if clash:
            raise SystemExit(f"{result.model}: figures {sorted(clash)} already given by another model")
        figures.update(result.figures)
    figures["wall_seconds"] = round(time.perf_counter() - t0, 1)
    figures["cpu_seconds"] = round(time.process_time() - c0, 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
