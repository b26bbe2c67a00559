#!/usr/bin/env bash
# The KGWE release the upgrade test starts from (tests/deploy/test_upgrade_real_node.py): the commit named in
# tests/compat/previous-commit, checked out in a clone of its own in the cache and built by that commit's own
# hack/image/build.sh, under the name ghcr.io/kgwe/kgwe-previous (so it never takes the place of the image
# under test). Both the clone and the archive are reused while they exist (build.sh keys the archive by
# its inputs), so after the first run this takes a second; `make bins` runs it once, before any test, beside
# the other builds. The base and dependency layers are taken from the current image's folder when their key
# matches (KGWE_IMAGE_DIR), so only KGWE's own layer is built.
#
# Last line: "ARCHIVE REFERENCE CHART_DIR COMMIT".
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
commit="$(tr -d '[:space:]' < "$root/tests/compat/previous-commit")"
cache="${KGWE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kgwe}"
checkout="$cache/previous/${commit:0:12}"
out_dir="$cache/image-previous-${commit:0:12}"
log() { echo "previous-image: $*" >&2; }

mkdir -p "$cache/previous" "$out_dir"
exec 9>"$cache/previous/.lock"
flock 9  # one checkout and build at a time (parallel test workers, several make runs)
# A clone of its own, not a `git worktree`: a worktree belongs to the checkout that added it, and broke once
# that checkout was deleted or another clone of the project ran with the same cache.
if [ "$(git -C "$checkout" rev-parse HEAD 2>/dev/null)" != "$commit" ] || [ ! -f "$checkout/hack/image/build.sh" ]; then
    log "checking out $commit into $checkout"
    rm -rf "$checkout"
    git clone -q --no-checkout "$root" "$checkout" >&2
    git -C "$checkout" checkout -q --detach "$commit" >&2
fi
[ "$(git -C "$checkout" rev-parse HEAD)" = "$commit" ] || { log "error: $checkout is not at $commit"; exit 1; }
current_images="${KGWE_IMAGE_DIR:-$cache/image}"
for runtime in "$current_images"/runtime-*.oci.tar; do
    [ -f "$runtime" ] && [ ! -f "$out_dir/$(basename "$runtime")" ] && cp --reflink=auto "$runtime" "$out_dir/"
done
line="$(KGWE_IMAGE_DIR="$out_dir" KGWE_IMAGE_NAME=ghcr.io/kgwe/kgwe-previous "$checkout/hack/image/build.sh" | tail -n1)"
echo "$line $checkout/deploy/helm/kgwe $commit"
