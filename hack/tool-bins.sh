#!/usr/bin/env bash
# Build the Go tools of one wrapper module under hack/ (helm, Flux's kustomize-controller) for KGWE's
# tests, cached like the Kubernetes binaries of hack/cluster-bins.sh.
#
# hack/<name>/go.mod pins the tool's module (and anything its own go.mod replaces, which a consumer does
# not inherit) and lists the commands as `tool` directives (single lines or a `tool ( ... )` block). A line
# `// ldflags: ...` in that go.mod adds linker flags ({version} is the tool module's version); a line
# `// tags: ...` sets build tags. When the command is the wrapper's own package (a small program of KGWE's
# that calls an upstream library), `// version-of: <module>` names the upstream module whose version keys the
# cache.
#
# Output: ${KGWE_CACHE_DIR:-~/.cache/kgwe}/<name>-<version>/<binary...> plus MANIFEST (version + wrapper
# module hash + Go version) and build-seconds; every build appends a line to build-times.log.
# A directory whose MANIFEST matches is reused as is. Prints the binary directory as its last line.
#
#   hack/tool-bins.sh helm            build if needed
#   hack/tool-bins.sh helm --cold     rebuild with an empty temporary Go build cache (to measure a first build)
#
# Everything runs inside main() so that editing this file cannot disturb a build already running.
set -euo pipefail

die() { echo "tool-bins: ERROR: $*" >&2; exit 1; }

main() {
    local name="${1:-}" cold=false
    [[ "$name" =~ ^[a-z0-9-]+$ ]] || die "usage: hack/tool-bins.sh <wrapper module under hack/> [--cold]"
    [[ "${2:-}" == "--cold" ]] && cold=true
    local root mod go_min_minor=26
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    mod="$root/hack/$name"
    [[ -f "$mod/go.mod" && -f "$mod/go.sum" ]] || die "no wrapper module hack/$name (go.mod + go.sum)"

    command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH). KGWE's tests build $name from
  Go modules and need Go >= 1.${go_min_minor}. Install it from https://go.dev/dl/ and put its bin directory on PATH."
    local goversion
    goversion="$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null || true)"
    [[ "$goversion" =~ ^go1\.([0-9]+) ]] || die "cannot tell the Go version (go env GOVERSION said '$goversion')"
    (( BASH_REMATCH[1] >= go_min_minor )) || die "Go $goversion is too old: hack/$name needs Go >= 1.${go_min_minor}"
    export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0

    local tools first version wrapper_sum ldflags tags
    mapfile -t tools < <(awk '/^tool[ \t]*\($/ {b=1; next} b && /^\)/ {b=0; next}
        b && NF == 1 {print $1} !b && $1 == "tool" && NF == 2 {print $2}' "$mod/go.mod")
    (( ${#tools[@]} > 0 )) || die "hack/$name/go.mod lists no \`tool\` directive (one line each: tool <package>)"
    first="${tools[0]}"
    version="$(cd "$mod" && go list -f '{{.Module.Version}}' "$first")" ||
        die "cannot resolve $first in hack/$name (run \`go mod download\` there, or check the network)"
    local version_of
    version_of="$(sed -n 's|^// version-of:[[:space:]]*||p' "$mod/go.mod" | head -1)"
    if [[ -z "$version" && -n "$version_of" ]]; then
        version="$(cd "$mod" && go list -m -f '{{.Version}}' "$version_of")" ||
            die "cannot resolve $version_of in hack/$name"
    fi
    [[ -n "$version" ]] || die "hack/$name: $first has no module version (add a \`// version-of:\` line)"
    wrapper_sum="$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)"
    ldflags="$(sed -n 's|^// ldflags:[[:space:]]*||p' "$mod/go.mod" | head -1)"
    ldflags="-s -w ${ldflags//\{version\}/$version}"
    tags="$(sed -n 's|^// tags:[[:space:]]*||p' "$mod/go.mod" | head -1)"

    local cache_base out manifest
    cache_base="${KGWE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kgwe}"
    out="$cache_base/$name-$version"
    manifest="$name=$version
wrapper=$wrapper_sum
go=$goversion"

    mkdir -p "$cache_base"
    exec 9>"$cache_base/.$name-$version.lock"
    lock() {
        if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
            echo "tool-bins: another build of $name $version is running; waiting for it" >&2
            flock 9
        fi
    }
    $cold || lock

    local complete=true t
    for t in "${tools[@]}"; do [[ -x "$out/${t##*/}" ]] || complete=false; done
    if ! $cold && $complete && [[ -f "$out/MANIFEST" && "$(cat "$out/MANIFEST")" == "$manifest" ]]; then
        echo "tool-bins: reusing $out" >&2
        echo "$out"
        return 0
    fi

    echo "tool-bins: building ${tools[*]} ($version) with $goversion into $out" >&2
    local start stage gocache_note="shared"
    start="$(date +%s)"
    stage="$(mktemp -d "$cache_base/.build-$name-XXXXXX")"
    # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
    trap "rm -rf '$stage'" EXIT
    if $cold; then
        export GOCACHE="$stage/.gocache"
        gocache_note="cold"
    fi
    # One `go build` for every command of the module (shared packages compiled once, links side by side).
    (
        cd "$mod"
        echo "tool-bins: go build ${tools[*]}" >&2
        go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$stage/" "${tools[@]}"
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
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $name=$version seconds=$seconds gocache=$gocache_note" \
        "cpus=$(nproc) mib=$(du -sm "$out" | cut -f1)" >> "$cache_base/build-times.log"
    echo "tool-bins: built in ${seconds}s; $(du -sh "$out" | cut -f1) in $out" >&2
    echo "$out"
}

main "$@"
