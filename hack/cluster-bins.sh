#!/usr/bin/env bash
# Build the real control-plane binaries KGWE's cluster tests and demo run against:
# kube-apiserver, kube-scheduler, etcd (wrapper module hack/k8s) and the kwok controller.
#
# There is no Docker and no binary download here, only the Go module proxy, so we compile.
# Output: ${KGWE_CACHE_DIR:-~/.cache/kgwe}/k8s-<version>/{kube-apiserver,kube-scheduler,etcd,kwok}
# plus MANIFEST (versions) and build-seconds (cold build wall time, read by bench/control_plane.py).
# Idempotent: a directory whose MANIFEST matches the pinned versions is reused as is.
# Prints the binary directory as its last line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$ROOT/hack/k8s"
KWOK_VERSION="v0.8.0"   # newest kwok; built from its own module (k8s libs 0.36.x, client side only)
GO_MIN_MINOR=26         # k8s.io/kubernetes v1.37 go.mod says `go 1.26.0`

die() { echo "cluster-bins: ERROR: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH). KGWE's cluster tests build
  kube-apiserver, kube-scheduler, etcd and kwok from Go modules and need Go >= 1.${GO_MIN_MINOR}.
  Install it from https://go.dev/dl/ (e.g. /usr/local/go) and put its bin directory on PATH."

GOVERSION="$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null || true)"
if [[ ! "$GOVERSION" =~ ^go1\.([0-9]+) ]]; then
    die "cannot tell the Go version (go env GOVERSION said '$GOVERSION'); need Go >= 1.${GO_MIN_MINOR}."
fi
if (( BASH_REMATCH[1] < GO_MIN_MINOR )); then
    die "Go $GOVERSION is too old: the Kubernetes release pinned in hack/k8s/go.mod needs Go >= 1.${GO_MIN_MINOR}.
  Install a newer Go from https://go.dev/dl/ and put it first on PATH."
fi

modver() { (cd "$MOD" && GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' "$1"); }
K8S_VERSION="$(modver k8s.io/kubernetes)"
[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "cannot read the k8s.io/kubernetes version from $MOD/go.mod"
K8S_MINOR="${BASH_REMATCH[1]}"
ETCD_VERSION="$(modver go.etcd.io/etcd/server/v3)"

CACHE_BASE="${KGWE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kgwe}"
OUT="$CACHE_BASE/k8s-$K8S_VERSION"
MANIFEST="kubernetes=$K8S_VERSION
etcd=$ETCD_VERSION
kwok=$KWOK_VERSION
go=$GOVERSION"

have_all() {
    [[ -f "$OUT/MANIFEST" ]] && [[ "$(head -3 "$OUT/MANIFEST")" == "$(echo "$MANIFEST" | head -3)" ]] || return 1
    for b in kube-apiserver kube-scheduler etcd kwok; do [[ -x "$OUT/$b" ]] || return 1; done
}

mkdir -p "$CACHE_BASE"
# One build at a time (make test and a pytest session may race for it).
exec 9>"$CACHE_BASE/.k8s-$K8S_VERSION.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

if have_all; then
    echo "cluster-bins: reusing $OUT ($(echo "$MANIFEST" | head -3 | tr '\n' ' '))" >&2
    echo "$OUT"
    exit 0
fi

echo "cluster-bins: building Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION with $GOVERSION" >&2
echo "cluster-bins: first build downloads ~1 GB of modules and compiles for several minutes; later runs reuse $OUT" >&2
START="$(date +%s)"
STAGE="$(mktemp -d "$CACHE_BASE/.build-XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT

export CGO_ENABLED=0
export GOTOOLCHAIN=local
BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

# Commit of the release tag, when the module proxy recorded it (stamped like a release build would).
k8s_commit="$(cd "$MOD" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>/dev/null |
    sed -n 's/.*"Hash": "\([0-9a-f]\{40\}\)".*/\1/p' | head -1 || true)"
CB="k8s.io/component-base/version"
K8S_LDFLAGS="-s -w -X $CB.gitMajor=1 -X $CB.gitMinor=$K8S_MINOR -X $CB.gitVersion=$K8S_VERSION
 -X $CB.gitCommit=${k8s_commit} -X $CB.gitTreeState=clean -X $CB.buildDate=$BUILD_DATE"
K8S_LDFLAGS="${K8S_LDFLAGS//$'\n'/}"

(
    cd "$MOD"
    export GOFLAGS=-mod=readonly
    for cmd in kube-apiserver kube-scheduler; do
        echo "cluster-bins: go build $cmd" >&2
        go build -trimpath -p 2 -ldflags "$K8S_LDFLAGS" -o "$STAGE/$cmd" "k8s.io/kubernetes/cmd/$cmd"
    done
    echo "cluster-bins: go build etcd" >&2
    go build -trimpath -p 2 -ldflags "-s -w" -o "$STAGE/etcd" go.etcd.io/etcd/server/v3
)

echo "cluster-bins: go install kwok $KWOK_VERSION" >&2
(
    cd "$STAGE"
    unset GOFLAGS
    GOBIN="$STAGE" go install -trimpath -p 2 \
        -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
        "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
)

SECONDS_TAKEN=$(( $(date +%s) - START ))
echo "$MANIFEST" > "$STAGE/MANIFEST"
echo "$SECONDS_TAKEN" > "$STAGE/build-seconds"
rm -rf "$OUT"
mv "$STAGE" "$OUT"
trap - EXIT
echo "cluster-bins: built in ${SECONDS_TAKEN}s; $(du -sh "$OUT" | cut -f1) in $OUT" >&2
echo "$OUT"
