#!/usr/bin/env bash
# Regenerate kgwe/policy/pod_template_spec.json: the PodTemplateSpec schema from the OpenAPI v3 document the
# Kubernetes release pinned in hack/k8s/go.mod publishes for batch/v1 (what the API server checks a Job's
# template against). Reads the module from the Go module cache (downloading it through the Go module proxy
# when missing). `make schemas` runs it; tests/policy/test_pod_template.py fails while the file is stale.
#
#   hack/pod-template-schema.sh            write kgwe/policy/pod_template_spec.json
#   hack/pod-template-schema.sh OUT        write OUT instead
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
out="${1:-$root/kgwe/policy/pod_template_spec.json}"
command -v go >/dev/null 2>&1 || { echo "pod-template-schema: Go is not on PATH (needed to read hack/k8s)" >&2; exit 1; }
cd "$root/hack/k8s"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
dir="$(go mod download -json "k8s.io/kubernetes@$version" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
openapi="$dir/api/openapi-spec/v3/apis__batch__v1_openapi.json"
[[ -f "$openapi" ]] || { echo "pod-template-schema: $openapi not found" >&2; exit 1; }
cd "$root" && "$python" -c 'import sys; from kgwe.policy.pod_template import main; sys.exit(main(sys.argv[1:]))' \
    "$openapi" "$version" "$out"
echo "wrote $out (Kubernetes $version)"
