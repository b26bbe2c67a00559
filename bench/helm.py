"""Benchmark of the Helm chart: helm build cost, `helm template` time, rendered object counts.

    .venv/bin/python bench/helm.py [--quick] [--runs N]

Prints figures, then one JSON line with helm_build_seconds_cold, helm_template_seconds (median),
chart_objects_default, chart_objects_seed, deploy_files.

helm_build_seconds_cold is what hack/tool-bins.sh recorded for a cold build of hack/helm (`hack/tool-bins.sh
helm --cold`, or the first build); the build is not redone. The Flux co-deployment figures (writes per object
per field manager, cross-owner writes) are printed by tests/deploy/test_flux_codeploy.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.harness
from kgwe.localcluster.gotools import recorded_build_seconds
from tests.harness import chart

SEED = ("--set", "scheduler.enabled=true", "--set", "migController.enabled=true")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 timed renders instead of --runs")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs

    helm_dir = chart.helm_binary().parent
    version = (helm_dir / "MANIFEST").read_text().splitlines()[0].split("=", 1)[1]
    cold, how = recorded_build_seconds(helm_dir, "helm", version)
    print(f"helm {version} build: {cold} s ({how})")

    seconds = []
    for _ in range(runs):
        t0 = time.monotonic()
        stream = chart.template()
        seconds.append(time.monotonic() - t0)
    median = statistics.median(seconds)
    default_objects = sum(1 for d in yaml.safe_load_all(stream) if d)
    seed_objects = sum(1 for d in yaml.safe_load_all(chart.template(*SEED)) if d)
    deploy_files = len(chart.deploy_files())
    spread = f"min {min(seconds):.3f}, max {max(seconds):.3f}"
    print(f"helm template: median {median:.3f} s over {runs} runs ({spread})")
    print(f"objects: {default_objects} with default values, {seed_objects} with the README's install command")
    print(f"deploy/: {deploy_files} files rendered from the chart")
    print(
        json.dumps(
            {
                "helm_version": version,
                "helm_build_seconds_cold": cold,
                "helm_template_seconds": round(median, 3),
                "chart_objects_default": default_objects,
                "chart_objects_seed": seed_objects,
                "deploy_files": deploy_files,
            }
        )
    )


if __name__ == "__main__":
    main()
