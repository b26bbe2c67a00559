"""The workload optimizer's decisions 2 and 4 and the spend forecast, on the public traces: rightsizing
advice from a pod's first hour (alibaba-genai-v2026, pods held out) against today's rule and the request,
the P90 bounds' coverage, the workload classes' checks, and the spend forecast's MAPE against
seasonal-naive (bench/cost.py's series). Last line: one JSON object.

    .venv/bin/python bench/optimizer_usage.py [--early-minutes 60] [--alternatives]
"""

from __future__ import annotations

import argparse
import json
import sys

from kgwe.cost import datasets
from kgwe.optimizer import classes_eval, spend_eval, usage_eval
from kgwe.optimizer.usage_figures import combine


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--early-minutes", type=float, default=60.0, help="the 'first minutes' window")
    ap.add_argument("--alternatives", action="store_true", help="also score other forecasters (minutes)")
    args = ap.parse_args()
    pods = datasets.genai_pod_series()
    daily = spend_eval.bench_series()
    early = args.early_minutes * 60
    usage = usage_eval.evaluate_usage(pods, early_seconds=early)
    for line in usage_eval.lines(usage):
        print(line)
    print(
        "model curve (P level, savings, exceed):", [tuple(round(x, 3) for x in c) for c in usage.model_curve]
    )
    print(
        "rule curve (margin, savings, exceed):",
        [tuple(round(x, 3) for x in c) for c in usage.rule_curve if c[0] in (0.0, 0.15, 0.5, 0.75, 1.0, 1.5)],
    )
    check = classes_eval.check_serving_trace(pods)
    print(f"classes: {check.counts}")
    spend = spend_eval.evaluate_spend(daily, alternatives=args.alternatives)
    for line in spend_eval.lines(spend):
        print(line)
    print(json.dumps(combine(usage, spend, check)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
