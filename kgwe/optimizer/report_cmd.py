"""`kgwe report` with the workload optimizer's part (its help is the cost report's, below)."""

from __future__ import annotations

import argparse

from kgwe.cost import report_cmd as cost_report
from kgwe.optimizer.report_insights import advise_pods

# The command lives here, above both, because the cost engine cannot import the optimizer that builds on it.
__doc__ = (cost_report.__doc__ or "") + (
    "\nWith --prometheus, rightsizing sizes a pod with less than a week of history on the predicted P90 of "
    "its\nlater use, predictions.md says what each pod will use and from what, and the efficiency report "
    "lists\nthe pods holding GPUs idle (docs/optimizer-usage.md).\n"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cost_report.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return cost_report.run(args, advisor=advise_pods)
