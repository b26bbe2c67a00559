#!/usr/bin/env bash
# Regenerate the image's pinned, hashed dependency lists (`make image-lock`) after changing the
# dependencies in pyproject.toml. Both lists are checked in so every image build installs exactly the
# reviewed versions, and pip's --require-hashes refuses anything else.
#   requirements.lock        KGWE's runtime dependencies (never its dev extras)
#   build-requirements.lock  the wheel's build backend (hatchling), used only while building the image
#   installer.lock           the wheel installer of the image's last step (from installer.in)
# Resolved for the image's interpreter: Debian trixie's Python 3.13 on Linux.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/hack/image"
python="${PYTHON:-python3}"
"$python" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 13) else "lock with Python 3.13 (the image runs trixie'"'"'s 3.13); set PYTHON")'
tools="$root/build/image-lock-venv"
if [ ! -x "$tools/bin/pip-compile" ]; then
    "$python" -m venv "$tools"
    "$tools/bin/pip" install -q 'pip-tools>=7.4,<8'
fi
cd "$root"
unset PIP_FIND_LINKS  # a host-local wheel folder must not leak into the lock
compile=("$tools/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links
         --resolver=backtracking --newline=lf)
"${compile[@]}" --output-file hack/image/requirements.lock pyproject.toml
"${compile[@]}" --only-build-deps --build-deps-for=wheel --output-file hack/image/build-requirements.lock pyproject.toml
"${compile[@]}" --output-file hack/image/installer.lock hack/image/installer.in
echo "wrote hack/image/requirements.lock, build-requirements.lock and installer.lock"
