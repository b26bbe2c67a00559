#!/usr/bin/env bash
# `make image`: build KGWE's one OCI image (controller, extender, agent, webhook) without a container daemon,
# in three layers so that an upgrade that changes only KGWE pulls only the last one:
#
#   1. the base (Debian trixie, minbase, with Python, git, ssh and CA certificates) and 2. the dependencies
#      (the virtual environment /opt/kgwe with every pinned dependency): mmdebstrap makes the root file
#      system and runs `hack/image/install.sh SRC runtime` inside it; the tree is split at /opt/kgwe into the
#      two layers. This runtime image is cached beside the archive, keyed by what it is made from
#      (hack/image/install.sh, requirements.lock, the Debian suite and mirrors), and reused until that
#      changes, so its layers keep their digests from one KGWE version to the next;
#   3. KGWE: its wheel (hack/image/wheel.sh, on this host) installed into the runtime image with buildah
#      (`install.sh WHEELS kgwe`); then the image config (the same user, environment and entrypoint as the
#      Containerfile) and the OCI labels, written as an OCI archive.
#
# The archive is reused when nothing it is made from changed (the repository's files, the commit it is
# labelled with): the key is stored beside it. Output: build/image/ (KGWE_IMAGE_DIR overrides). The last line
# printed is "ARCHIVE REFERENCE". Push it with: skopeo copy oci-archive:ARCHIVE docker://REGISTRY/kgwe:VERSION
# Needs root (mmdebstrap's root mode); hack/host-packages.sh installs mmdebstrap, buildah and skopeo when missing.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
out_dir="${KGWE_IMAGE_DIR:-$root/build/image}"
name="${KGWE_IMAGE_NAME:-ghcr.io/kgwe/kgwe}"
source_url="${KGWE_IMAGE_SOURCE:-https://github.com/kgwe/kgwe}"
mirror="${KGWE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${KGWE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
uid=65532
# Debian 13: its Python 3.13 has tarfile's extraction filters, which KGWE's Git export relies on (bookworm's
# 3.11.2 predates them). The Containerfile's FROM names the same suite.
suite=trixie
# A CA bundle for reaching the package index during the build (e.g. behind a TLS-intercepting proxy):
# pip's own setting by default; used while installing, never left in the image.
ca_file="${KGWE_IMAGE_CA_FILE:-${PIP_CERT:-}}"

log() { echo "image: $*" >&2; }
die() { echo "image: error: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "mmdebstrap's root mode needs root"
"$root/hack/host-packages.sh" || die "the image build needs Debian packages (hack/host-packages.sh)"

# What goes into the image (the wheel's sources and data, and this folder); nothing else is staged or hashed.
inputs=(pyproject.toml README.md kgwe templates schemas deploy sample-repo docs/examples hack/image hack/protos.py)
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml" | head -n1)"
[ -n "$version" ] || die "no version in pyproject.toml"
ref="$name:$version"
revision="unknown"
epoch="$(date +%s)"
if git -C "$root" rev-parse --verify -q HEAD >/dev/null; then
    revision="$(git -C "$root" rev-parse HEAD)"
    epoch="$(git -C "$root" log -1 --format=%ct)"
    [ -z "$(git -C "$root" status --porcelain --untracked-files=normal -- "${inputs[@]}")" ] ||
        revision="$revision-dirty"
fi
export SOURCE_DATE_EPOCH="$epoch"

mkdir -p "$out_dir"
archive="$out_dir/kgwe-$version.oci.tar"
exec 9>"$out_dir/.lock"
flock 9  # one build at a time per output folder (tests and `make image` may share it)

stage="$(mktemp -d "${TMPDIR:-/tmp}/kgwe-image.XXXXXX")"
ctr=""
cleanup() {
    [ -z "$ctr" ] || buildah rm "$ctr" >/dev/null 2>&1 || true
    rm -rf "$stage"
}
trap cleanup EXIT

# The build context: the inputs' files as git sees them (tracked and new, never ignored ones such as
# __pycache__), from the work tree so uncommitted changes are built too.
mkdir -p "$stage/src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard -- "${inputs[@]}") |
    (cd "$root" && while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done) |
    tar -C "$root" --null -T - -cf - | tar -C "$stage/src" -xf -
key="$( (cd "$stage/src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
         echo "$ref $revision $source_url $mirror $suite") | sha256sum | cut -c1-64)"
if [ -f "$archive" ] && [ "$(cat "$archive.key" 2>/dev/null)" = "$key" ]; then
    log "unchanged inputs: reusing $archive"
    echo "$archive $ref"
    exit 0
fi

started="$(date +%s)"
# install.sh runs in a clean environment (the host's variables name host paths); only the package index
# settings and proxies pass through.
install_env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root)
for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [ -z "${!var:-}" ] || install_env+=("$var=${!var}")
done
if [ -n "$ca_file" ]; then
    [ -f "$ca_file" ] || die "CA bundle $ca_file not found (KGWE_IMAGE_CA_FILE or PIP_CERT)"
    install_env+=(PIP_CERT=/usr/src/kgwe/.build-ca.pem)
fi

# Layers 1 and 2, reused while their inputs are unchanged.
runtime_key="$( (cd "$root" && sha256sum hack/image/install.sh hack/image/requirements.lock
                 echo "$suite $mirror $security_mirror $uid") | sha256sum | cut -c1-16)"
runtime="$out_dir/runtime-$runtime_key.oci.tar"
if [ -f "$runtime" ]; then
    log "reusing the base and dependency layers $runtime"
else
    log "building the base and dependency layers (Debian $suite, hack/image/requirements.lock)"
    mkdir -p "$stage/runtime-src/hack"
    cp -a "$root/hack/image" "$stage/runtime-src/hack/image"
    [ -z "$ca_file" ] || cp "$ca_file" "$stage/runtime-src/.build-ca.pem"
    rootfs="$stage/rootfs.tar"
    # shellcheck disable=SC2016  # $1 is expanded by mmdebstrap's hook shell: the root being built
    mmdebstrap --mode=root --variant=minbase --format=tar --components=main \
        --aptopt='Acquire::Retries "3"' \
        --customize-hook="copy-in $stage/runtime-src /usr/src" \
        --customize-hook='mv "$1/usr/src/runtime-src" "$1/usr/src/kgwe" && chroot "$1" '"${install_env[*]}"' sh /usr/src/kgwe/hack/image/install.sh /usr/src/kgwe runtime' \
        --customize-hook='rm -rf "$1/usr/src/kgwe" && : > "$1/etc/resolv.conf" && : > "$1/etc/hostname"' \
        "$suite" "$rootfs" \
        "deb $mirror $suite main" "deb $mirror $suite-updates main" \
        "deb $security_mirror $suite-security main" >&2
    # Split the tree at /opt/kgwe: the base layer, then the dependency layer.
    python3 - "$rootfs" "$stage/base.tar" "$stage/deps.tar" <<'PY'
import sys, tarfile
source, base, deps = sys.argv[1:]
with tarfile.open(source) as src, tarfile.open(base, "w", format=tarfile.PAX_FORMAT) as b, \
        tarfile.open(deps, "w", format=tarfile.PAX_FORMAT) as d:
    for member in src:
        name = member.name.removeprefix("./")
        target = d if name == "opt/kgwe" or name.startswith("opt/kgwe/") else b
        target.addfile(member, src.extractfile(member) if member.isreg() else None)
PY
    rm -f "$rootfs"
    ctr="$(buildah from scratch)"
    buildah add --quiet "$ctr" "$stage/base.tar" / >/dev/null
    base_image="$(buildah commit --quiet --rm --timestamp "$epoch" "$ctr")"
    ctr="$(buildah from "$base_image")"
    buildah add --quiet "$ctr" "$stage/deps.tar" / >/dev/null
    buildah commit --quiet --rm --format oci --disable-compression=false --timestamp "$epoch" "$ctr" \
        "oci-archive:$runtime.part:kgwe-runtime:$runtime_key" >/dev/null
    ctr=""
    buildah rmi "$base_image" >/dev/null 2>&1 || true
    rm -f "$stage/base.tar" "$stage/deps.tar"
    mv -f "$runtime.part" "$runtime"
    find "$out_dir" -maxdepth 1 -name 'runtime-*.oci.tar' ! -name "runtime-$runtime_key.oci.tar" -delete
fi

# Layer 3: KGWE's wheel, installed with the image's own Python.
log "building KGWE's wheel"
(cd "$stage/src" && sh hack/image/wheel.sh "$stage/src" "$stage/wheels") >&2
ctr="$(buildah from --quiet "oci-archive:$runtime")"
runtime_id="$(buildah inspect --type container --format '{{.FromImageID}}' "$ctr")"
buildah run --isolation chroot --user 0:0 \
    -v "$stage/wheels:/usr/src/kgwe-wheels:ro" -v "$stage/src/hack/image:/usr/src/kgwe-image:ro" "$ctr" -- \
    sh /usr/src/kgwe-image/install.sh /usr/src/kgwe-wheels kgwe >&2
mnt="$(buildah mount "$ctr")"  # the run's mount points are no part of the image
rmdir "$mnt/usr/src/kgwe-wheels" "$mnt/usr/src/kgwe-image"
buildah umount "$ctr" >/dev/null
# The image config: keep it equal to the Containerfile's (tests/image compares them).
buildah config \
    --user "$uid:$uid" \
    --entrypoint '["kgwe"]' --cmd '["--help"]' \
    --env PATH=/opt/kgwe/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env PYTHONDONTWRITEBYTECODE=1 \
    --env PYTHONUNBUFFERED=1 \
    --env LANG=C.UTF-8 \
    --env HOME=/tmp \
    --label org.opencontainers.image.title=kgwe \
    --label "org.opencontainers.image.description=Kubernetes GPU Workload Enhancer: GitOps control plane for GPU policy" \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    --label "org.opencontainers.image.source=$source_url" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$revision" \
    --label "org.opencontainers.image.base.name=debian:$suite (mmdebstrap minbase)" \
    "$ctr"
buildah commit --quiet --format oci --disable-compression=false --timestamp "$epoch" "$ctr" "oci-archive:$archive.part:$ref" >/dev/null
buildah rm "$ctr" >/dev/null; ctr=""
buildah rmi "$runtime_id" >/dev/null 2>&1 || true
mv -f "$archive.part" "$archive"
echo "$key" > "$archive.key"
log "built in $(( $(date +%s) - started )) s: $(du -m "$archive" | cut -f1) MB archive"
echo "$archive $ref"
