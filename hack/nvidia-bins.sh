#!/usr/bin/env bash
# Build NVIDIA's GPU stack for the local cluster's GPU node (`kgwe cluster up --gpu-profile`) from the two
# source archives NVIDIA publishes and KGWE does not carry (neither is served by the Go module proxy):
#
#   nvml-mock-<commit>.tar.gz        NVIDIA k8s-test-infra's mock NVML ("Mokka"): libnvidia-ml.so.1 behind
#                                    NVML's C ABI (CGo), with its GPU profiles (configs/)
#   k8s-device-plugin-<tag>.tar.gz   NVIDIA k8s-device-plugin: nvidia-device-plugin, gpu-feature-discovery
#                                    and config-manager (CGo: they dlopen libnvidia-ml.so.1), offline from
#                                    its vendor/ tree
#
# The archives are read from a `shared/vendor` folder beside or above the checkout, or from $KGWE_VENDOR
# (docs/building.md); they are extracted into a temporary directory for the build and never copied into the
# checkout. Output, cached like the Go tools of hack/tool-bins.sh:
#   ${KGWE_CACHE_DIR:-~/.cache/kgwe}/nvml-mock-<commit>/        libnvidia-ml.so.<driver>, .so.1, configs/
#   ${KGWE_CACHE_DIR:-~/.cache/kgwe}/k8s-device-plugin-<tag>/   the three commands
# each with MANIFEST (archive digest + this script's digest + Go and gcc versions) and build-seconds; a
# directory whose MANIFEST matches is reused. Every build appends a line to build-times.log. Prints
# `nvml-mock=DIR` and `device-plugin=DIR` on stdout.
#
#   hack/nvidia-bins.sh          build what is missing
#   hack/nvidia-bins.sh --cold   rebuild both with an empty temporary Go build cache (to measure a first build)
#
# Everything runs inside main() so that editing this file cannot disturb a build already running.
set -euo pipefail

die() { echo "nvidia-bins: ERROR: $*" >&2; exit 1; }

vendor_dir() {
    local root="$1" dir
    if [[ -n "${KGWE_VENDOR:-}" ]]; then
        [[ -d "$KGWE_VENDOR" ]] || die "KGWE_VENDOR=$KGWE_VENDOR is not a directory"
        echo "$KGWE_VENDOR"
        return
    fi
    dir="$root"
    while [[ "$dir" != "/" ]]; do
        if [[ -d "$dir/shared/vendor" ]]; then
            echo "$dir/shared/vendor"
            return
        fi
        dir="$(dirname "$dir")"
    done
    [[ -d /work/shared/vendor ]] && { echo /work/shared/vendor; return; }
    die "NVIDIA's source archives not found: put them in a shared/vendor folder beside or above the checkout,
  or set KGWE_VENDOR to their folder (docs/building.md lists them)"
}

# build_one NAME VERSION ARCHIVE COLD BUILDER CACHE RECIPE_DIGEST: extract, build into a stage directory, publish it as NAME.
build_one() {
    local name="$1" version="$2" archive="$3" cold="$4" builder="$5" cache_base="$6" script_sum="$7"
    local out="$cache_base/$name" manifest archive_sum goversion gccversion
    archive_sum="$(sha256sum "$archive" | cut -c1-16)"
    goversion="$(GOTOOLCHAIN=local go env GOVERSION)"
    gccversion="$(gcc -dumpfullversion 2>/dev/null || gcc -dumpversion)"
    manifest="$name
archive=$archive_sum
recipe=$script_sum
go=$goversion
gcc=$gccversion"
    exec 9>"$cache_base/.$name.lock"
    if ! flock -n 9; then
        echo "nvidia-bins: another build of $name is running; waiting for it" >&2
        flock 9
    fi
    if [[ "$cold" == false && -f "$out/MANIFEST" && "$(cat "$out/MANIFEST")" == "$manifest" ]]; then
        echo "nvidia-bins: reusing $out" >&2
        echo "$out"
        return 0
    fi
    echo "nvidia-bins: building $name from $archive with $goversion" >&2
    local start stage src seconds gocache_note=shared
    start="$(date +%s)"
    stage="$(mktemp -d "$cache_base/.build-$name-XXXXXX")"
    src="$(mktemp -d "$cache_base/.src-$name-XXXXXX")"
    # shellcheck disable=SC2064  # expand now: the trap must remove these very directories
    trap "rm -rf '$stage' '$src'" EXIT
    tar -xzf "$archive" -C "$src" --strip-components=1 --no-same-owner
    if [[ "$cold" == true ]]; then
        export GOCACHE="$src/.gocache"
        gocache_note=cold
    fi
    "$builder" "$src" "$stage" "$version" || die "building $name failed (its messages are above)"
    seconds=$(( $(date +%s) - start ))
    echo "$manifest" > "$stage/MANIFEST"
    echo "$seconds" > "$stage/build-seconds"
    rm -rf "$out.old"
    [[ -e "$out" ]] && mv "$out" "$out.old"
    mv "$stage" "$out"
    rm -rf "$out.old"
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $name seconds=$seconds gocache=$gocache_note cpus=$(nproc)" \
        "mib=$(du -sm "$out" | cut -f1)" >> "$cache_base/build-times.log"
    echo "nvidia-bins: built $name in ${seconds}s; $(du -sh "$out" | cut -f1) in $out" >&2
    echo "$out"
}

# The mock NVML library as its own Makefile builds it, unpadded (NO_PADDING=1: the padding only makes the
# file as large as a real driver's); its two go.mod requirements come from the module proxy. (Called in an
# `|| die` list, where errexit does not apply: every step checks itself.)
build_nvml_mock() {
    local src="$1" stage="$2" dir lib_version real
    dir="$src/pkg/gpu/mocknvml"
    lib_version="$(sed -n 's/^LIB_VERSION[[:space:]]*?=[[:space:]]*//p' "$dir/Makefile" | head -1)"
    [[ -n "$lib_version" ]] || { echo "no LIB_VERSION in the mock's Makefile" >&2; return 1; }
    real="libnvidia-ml.so.$lib_version"
    (cd "$dir" && GOFLAGS=-mod=mod CGO_ENABLED=1 nice -n 10 make --no-print-directory NO_PADDING=1 2>&1) |
        quiet_cgo >&2
    [[ -f "$dir/$real" ]] || { echo "the mock's make built no $real" >&2; return 1; }
    cp "$dir/$real" "$stage/" &&
        ln -s "$real" "$stage/libnvidia-ml.so.1" &&
        ln -s libnvidia-ml.so.1 "$stage/libnvidia-ml.so" &&
        cp -r "$dir/configs" "$stage/configs" &&
        cp "$src/LICENSE" "$stage/LICENSE"
}

# The device plugin's three commands, offline from its vendor/ tree, version stamped as its Makefile does.
build_device_plugin() {
    local src="$1" stage="$2" version="$3" c
    (
        cd "$src" &&
            GOFLAGS=-mod=vendor CGO_ENABLED=1 nice -n 10 go build -trimpath \
                -ldflags "-s -w -X github.com/NVIDIA/k8s-device-plugin/internal/info.version=$version" \
                -o "$stage/" ./cmd/nvidia-device-plugin ./cmd/gpu-feature-discovery ./cmd/config-manager 2>&1
    ) | quiet_cgo >&2
    for c in nvidia-device-plugin gpu-feature-discovery config-manager; do
        [[ -x "$stage/$c" ]] || { echo "go build made no $c" >&2; return 1; }
    done
    cp "$src/LICENSE" "$stage/LICENSE"
}

# go-nvml's cgo preamble warns about every deprecated NVML call (hundreds of lines): leave those out.
quiet_cgo() {
    grep -v -e 'deprecated' -e 'cgo-gcc-prolog' -e 'DEPRECATED' -e '^ *|' -e '^ *[0-9]* |' \
        -e 'In file included' -e 'note: declared here' -e '^CGO_LDFLAGS' || true
}

main() {
    local cold=false
    [[ "${1:-}" == "--cold" ]] && cold=true
    local root cache_base vendor script_sum
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    cache_base="${KGWE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kgwe}"
    mkdir -p "$cache_base"
    command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH): NVIDIA's device plugin and
  mock NVML are Go (with CGo). Install Go >= 1.26 from https://go.dev/dl/ and put its bin directory on PATH."
    command -v gcc >/dev/null 2>&1 || die "gcc is missing (CGo): run \`make host-packages\`"
    export GOTOOLCHAIN=local
    vendor="$(vendor_dir "$root")"
    script_sum="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
    local mock plugin
    mock="$(compgen -G "$vendor/nvml-mock-*.tar.gz" | sort | tail -1 || true)"
    plugin="$(compgen -G "$vendor/k8s-device-plugin-v*.tar.gz" | sort -V | tail -1 || true)"
    [[ -f "$mock" ]] || die "no nvml-mock-<commit>.tar.gz in $vendor"
    [[ -f "$plugin" ]] || die "no k8s-device-plugin-v<version>.tar.gz in $vendor"
    local mock_name plugin_name dir
    mock_name="$(basename "$mock" .tar.gz)"
    plugin_name="$(basename "$plugin" .tar.gz)"
    dir="$(build_one "$mock_name" "${mock_name#nvml-mock-}" "$mock" "$cold" build_nvml_mock "$cache_base" \
        "$script_sum" | tail -1)"
    [[ -d "$dir" ]] || die "the mock NVML build printed no directory"
    echo "nvml-mock=$dir"
    dir="$(build_one "$plugin_name" "${plugin_name#k8s-device-plugin-}" "$plugin" "$cold" build_device_plugin \
        "$cache_base" "$script_sum" | tail -1)"
    [[ -d "$dir" ]] || die "the device plugin build printed no directory"
    echo "device-plugin=$dir"
}

main "$@"
