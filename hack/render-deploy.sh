#!/usr/bin/env bash
# Render deploy/ (the kustomize base) from the Helm chart deploy/helm/kgwe with its default values, using
# the helm CLI built by hack/tool-bins.sh. Edit the chart, then run this (or `make deploy`);
# tests/deploy/test_helm_chart.py fails while deploy/ and the chart differ.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$python" ]] || { echo "render-deploy: $python not found; run \`make venv\` first" >&2; exit 1; }
cd "$root" && exec "$python" -m tests.harness.chart --out "$root/deploy"
