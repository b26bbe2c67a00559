#!/bin/sh
# KGWE's wheel, built with the pinned build backend (hack/image/build-requirements.lock), and the pinned
# installer's wheel (hack/image/installer.lock), both into OUT_DIR: what `install.sh OUT_DIR kgwe` installs.
# Needs python3 with venv and pip, and the package index; the wheel is pure Python, any Python 3.11+ builds
# it. Run by hack/image/build.sh on the build host and by the Containerfile's wheel stage.
#
#   wheel.sh SOURCE_DIR OUT_DIR
set -eu
src=${1:?usage: wheel.sh SOURCE_DIR OUT_DIR}
out=${2:?usage: wheel.sh SOURCE_DIR OUT_DIR}
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore
unset PIP_FIND_LINKS PIP_REQUIRE_VIRTUALENV
work=$(mktemp -d "${TMPDIR:-/tmp}/kgwe-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
cp -a "$src/." "$work/src"   # the build writes next to the sources; never into the caller's tree
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --require-hashes --only-binary=:all: --no-deps \
    -r "$src/hack/image/build-requirements.lock"
"$work/venv/bin/pip" wheel -q --no-deps --no-build-isolation --wheel-dir "$out" "$work/src"
"$work/venv/bin/pip" download -q --require-hashes --only-binary=:all: --no-deps --dest "$out" \
    -r "$src/hack/image/installer.lock"
