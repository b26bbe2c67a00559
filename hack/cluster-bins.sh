#!/usr/bin/env bash
# Build the real control-plane binaries KGWE's cluster tests and demo run against:
# kube-apiserver, kube-scheduler, kube-controller-manager, etcd and the kwok controller, plus the real node's
# kubelet and kube-proxy, all from the wrapper module hack/k8s
# (one module graph: kwok is compiled against the same k8s.io libraries as the apiserver and shares
# their compiled packages, which saves minutes on a cold build).
#
# There is no Docker and no binary download here, only the Go module proxy, so we compile.
# Output: ${KGWE_CACHE_DIR:-~/.cache/kgwe}/k8s-<version>/{kube-apiserver,kube-scheduler,kube-controller-manager,kubelet,kube-proxy,etcd,kwok}
# plus MANIFEST (versions + wrapper module hash) and build-seconds. Every build also appends a line to
# ${KGWE_CACHE_DIR:-~/.cache/kgwe}/build-times.log (bench/control_plane.py reads the cold ones).
# Idempotent: a directory whose MANIFEST matches the wrapper module is reused as is.
# Prints the binary directory as its last line.
#
#   hack/cluster-bins.sh          build if needed
#   hack/cluster-bins.sh --cold   rebuild with an empty temporary Go build cache, to measure a first build
#
# Everything runs inside main() so that editing this file cannot disturb a build already running.
set -euo pipefail

die() { echo "cluster-bins: ERROR: $*" >&2; exit 1; }

main() {
    local cold=false
    [[ "${1:-}" == "--cold" ]] && cold=true
    local root mod go_min_minor=26  # k8s.io/kubernetes v1.37 go.mod says `go 1.26.0`
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    mod="$root/hack/k8s"

    command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH). KGWE's cluster tests build
  kube-apiserver, kube-scheduler, etcd and kwok from Go modules and need Go >= 1.${go_min_minor}.
  Install it from https://go.dev/dl/ (e.g. /usr/local/go) and put its bin directory on PATH."

    local goversion
    goversion="$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null || true)"
    [[ "$goversion" =~ ^go1\.([0-9]+) ]] ||
        die "cannot tell the Go version (go env GOVERSION said '$goversion'); need Go >= 1.${go_min_minor}."
    if (( BASH_REMATCH[1] < go_min_minor )); then
        die "Go $goversion is too old: the Kubernetes release pinned in hack/k8s/go.mod needs Go >= 1.${go_min_minor}.
  Install a newer Go from https://go.dev/dl/ and put it first on PATH."
    fi
    export GOTOOLCHAIN=local

    modver() { (cd "$mod" && GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' "$1"); }
    local k8s_version etcd_version kwok_version k8s_minor wrapper_sum
    k8s_version="$(modver k8s.io/kubernetes)"
    [[ "$k8s_version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "cannot read the k8s.io/kubernetes version from $mod/go.mod"
    k8s_minor="${BASH_REMATCH[1]}"
    etcd_version="$(modver go.etcd.io/etcd/server/v3)"
    kwok_version="$(modver sigs.k8s.io/kwok)"
    # Any change to the wrapper module (a dependency bump) must rebuild, not only a version change.
    wrapper_sum="$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)"

    local cache_base out manifest
    cache_base="${KGWE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kgwe}"
    out="$cache_base/k8s-$k8s_version"
    manifest="kubernetes=$k8s_version
etcd=$etcd_version
kwok=$kwok_version
wrapper=$wrapper_sum
go=$goversion"

    mkdir -p "$cache_base"
    # One build at a time (make test and pytest sessions may race for it). A --cold measurement build
    # only locks for the final swap, so test runs keep using the existing binaries meanwhile.
    exec 9>"$cache_base/.k8s-$k8s_version.lock"
    lock() {
        if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
            echo "cluster-bins: another build of $k8s_version is running; waiting for it" >&2
            flock 9
        fi
    }
    $cold || lock

    if ! $cold && [[ -f "$out/MANIFEST" ]] &&
        [[ "$(head -4 "$out/MANIFEST")" == "$(echo "$manifest" | head -4)" ]] &&
        [[ -x "$out/kube-apiserver" && -x "$out/kube-scheduler" && -x "$out/kube-controller-manager" &&
          -x "$out/kubelet" && -x "$out/kube-proxy" && -x "$out/etcd" && -x "$out/kwok" ]]; then
        echo "cluster-bins: reusing $out ($(echo "$manifest" | head -3 | tr '\n' ' '))" >&2
        echo "$out"
        return 0
    fi

    echo "cluster-bins: building Kubernetes $k8s_version, etcd $etcd_version, kwok $kwok_version with $goversion" >&2
    echo "cluster-bins: a first build downloads ~700 MB of modules and compiles for ~10 minutes on 2 cores;" \
         "later runs reuse $out" >&2
    local start stage gocache_note="shared"
    start="$(date +%s)"
    stage="$(mktemp -d "$cache_base/.build-XXXXXX")"
    # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
    trap "rm -rf '$stage'" EXIT
    if $cold; then
        export GOCACHE="$stage/.gocache"
        gocache_note="cold"
    fi
    export CGO_ENABLED=0

    # Commit of the release tag, when the module proxy recorded it (stamped like a release build would).
    local k8s_commit cb k8s_ldflags
    k8s_commit="$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$k8s_version" 2>/dev/null |
        sed -n 's/.*"Hash": "\([0-9a-f]\{40\}\)".*/\1/p' | head -1 || true)"
    cb="k8s.io/component-base/version"
    k8s_ldflags="-s -w -X $cb.gitMajor=1 -X $cb.gitMinor=$k8s_minor -X $cb.gitVersion=$k8s_version"
    k8s_ldflags+=" -X $cb.gitCommit=$k8s_commit -X $cb.gitTreeState=clean"
    k8s_ldflags+=" -X $cb.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"

    # One `go build` for all seven commands: one load of the module graph, shared packages compiled once,
    # compiles and links running side by side (separate builds repeat the loading and link one at a time).
    # The -X flags name variables of packages a command may not link; Go ignores those.
    (
        cd "$mod"
        export GOFLAGS=-mod=readonly
        local cmds=(kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy)
        echo "cluster-bins: go build ${cmds[*]} etcd kwok" >&2
        go build -trimpath \
            -ldflags "$k8s_ldflags -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version" \
            -o "$stage/" "${cmds[@]/#/k8s.io/kubernetes/cmd/}" go.etcd.io/etcd/server/v3 sigs.k8s.io/kwok/cmd/kwok
        mv "$stage/server" "$stage/etcd"  # go.etcd.io/etcd/server/v3's binary is named after "server"
    )
    $cold && rm -rf "$GOCACHE"

    local seconds old
    seconds=$(( $(date +%s) - start ))
    ! $cold || lock
    echo "$manifest" > "$stage/MANIFEST"
    echo "$seconds" > "$stage/build-seconds"
    old="$out.old-$$"
    [[ -e "$out" ]] && mv "$out" "$old"
    mv "$stage" "$out"
    trap - EXIT
    rm -rf "$old"
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) kubernetes=$k8s_version seconds=$seconds gocache=$gocache_note" \
        "cpus=$(nproc) mib=$(du -sm "$out" | cut -f1)" >> "$cache_base/build-times.log"
    echo "cluster-bins: built in ${seconds}s; $(du -sh "$out" | cut -f1) in $out" >&2
    echo "$out"
}

main "$@"
