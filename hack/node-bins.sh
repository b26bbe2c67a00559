#!/usr/bin/env bash
# Build what the local cluster's real node runs besides kubelet and kube-proxy (those come from
# hack/cluster-bins.sh): containerd v2 with ctr and the runc shim, the CNI plugins, CoreDNS (wrapper modules
# hack/containerd, hack/cni, hack/coredns, built by hack/tool-bins.sh) and the pause binary (the sandbox
# image's only file, compiled from build/pause/linux/pause.c of the k8s.io/kubernetes module that
# hack/k8s pins). runc, nft, iptables and ip come from Debian: hack/host-packages.sh installs them when missing (as root;
# `make test` runs it once before anything runs in parallel).
#
# Output: one `name=directory` line per component on stdout (containerd, cni, coredns, pause, runc), the
# pause directory holding `pause`, MANIFEST and build-seconds like the Go tools'. Every build appends a
# line to ${KGWE_CACHE_DIR:-~/.cache/kgwe}/build-times.log; cached builds are reused as they are.
#
#   hack/node-bins.sh          build what is missing
#   hack/node-bins.sh --cold   rebuild everything with empty temporary Go build caches (to measure a first
#                              build); prints the total as `node-bins: built in Ns`
#
# Everything runs inside main() so that editing this file cannot disturb a build already running.
set -euo pipefail

die() { echo "node-bins: ERROR: $*" >&2; exit 1; }

build_pause() {
    local root="$1" cache_base="$2" cold="$3"
    local k8s_version src tag source_sum gcc_version out manifest
    k8s_version="$(cd "$root/hack/k8s" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' k8s.io/kubernetes)"
    src="$(cd "$root/hack/k8s" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
    if [[ ! -f "$src/build/pause/linux/pause.c" ]]; then
        (cd "$root/hack/k8s" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go mod download k8s.io/kubernetes) >&2
    fi
    [[ -f "$src/build/pause/linux/pause.c" ]] || die "no build/pause/linux/pause.c in k8s.io/kubernetes $k8s_version"
    tag="$(sed -n 's/^TAG ?= *//p' "$src/build/pause/Makefile" | head -1)"
    [[ -n "$tag" ]] || die "cannot read the pause image's TAG from $src/build/pause/Makefile"
    source_sum="$(sha256sum "$src/build/pause/linux/pause.c" | cut -c1-16)"
    gcc_version="$(gcc -dumpfullversion 2>/dev/null || gcc -dumpversion)"
    out="$cache_base/pause-$tag"
    manifest="pause=$tag
kubernetes=$k8s_version
source=$source_sum
gcc=$gcc_version"
    exec 8>"$cache_base/.pause-$tag.lock"
    flock 8
    if [[ "$cold" == false && -x "$out/pause" && -f "$out/MANIFEST" && "$(cat "$out/MANIFEST")" == "$manifest" ]]; then
        echo "node-bins: reusing $out" >&2
        echo "pause=$out"
        return 0
    fi
    local start stage seconds
    start="$(date +%s)"
    stage="$(mktemp -d "$cache_base/.build-pause-XXXXXX")"
    # The flags of build/pause/Makefile (CFLAGS), then stripped as its release binaries are.
    nice -n 10 gcc -Os -Wall -Werror -static "-DVERSION=v$tag-kgwe" -o "$stage/pause" "$src/build/pause/linux/pause.c" ||
        { rm -rf "$stage"; die "gcc -static failed on pause.c (is libc6-dev installed?)"; }
    strip "$stage/pause" 2>/dev/null || true
    seconds=$(( $(date +%s) - start ))
    echo "$manifest" > "$stage/MANIFEST"
    echo "$seconds" > "$stage/build-seconds"
    rm -rf "$out"
    mv "$stage" "$out"
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) pause=$tag seconds=$seconds gocache=none cpus=$(nproc)" \
        "mib=$(du -sm "$out" | cut -f1)" >> "$cache_base/build-times.log"
    echo "pause=$out"
}

main() {
    local cold=false
    [[ "${1:-}" == "--cold" ]] && cold=true
    local root cache_base start name dir
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    cache_base="${KGWE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kgwe}"
    mkdir -p "$cache_base"
    start="$(date +%s)"
    "$root/hack/host-packages.sh" || die "the real node needs Debian packages (hack/host-packages.sh)"
    # The three Go builds at once: one's module downloads overlap another's compiling (each takes its own
    # lock and Go's build cache is shared safely).
    local outputs pids=() names=(containerd cni coredns) i flag=()
    $cold && flag=(--cold)
    outputs="$(mktemp -d)"
    # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
    trap "rm -rf '$outputs'" EXIT
    for name in "${names[@]}"; do
        nice -n 10 bash "$root/hack/tool-bins.sh" "$name" "${flag[@]}" > "$outputs/$name" &
        pids+=("$!")
    done
    for i in "${!names[@]}"; do
        wait "${pids[$i]}" || die "hack/tool-bins.sh ${names[$i]} failed (its message is above)"
        dir="$(tail -1 "$outputs/${names[$i]}")"
        [[ -d "$dir" ]] || die "hack/tool-bins.sh ${names[$i]} printed no directory"
        echo "${names[$i]}=$dir"
    done
    build_pause "$root" "$cache_base" "$cold"
    echo "runc=$(dirname "$(PATH="$PATH:/usr/sbin:/sbin" command -v runc)")"
    if $cold; then
        echo "node-bins: built in $(( $(date +%s) - start ))s (containerd, CNI plugins, CoreDNS, pause)" >&2
    fi
}

main "$@"
