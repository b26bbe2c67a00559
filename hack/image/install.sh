#!/bin/sh
# Install KGWE into a Debian trixie root filesystem, in two steps that become the image's layers. This is
# the one install script of both image routes, so they cannot drift: `make image` (hack/image/build.sh)
# runs `runtime` as root inside an mmdebstrap chroot and `kgwe` inside the image with buildah; the
# Containerfile runs both on debian:trixie-slim.
#
#   install.sh SOURCE_DIR runtime   SOURCE_DIR: the repository's files (only hack/image is read)
#   install.sh WHEEL_DIR kgwe       WHEEL_DIR: KGWE's wheel and the installer's (hack/image/wheel.sh)
#
# runtime: Debian's python3 (git, ssh, CA certificates) and, in the virtual environment /opt/kgwe, every
#   dependency at the version and hash pinned in hack/image/requirements.lock (binary wheels only: no
#   compiler is ever installed), .pyc precompiled, a non-root user kgwe (uid/gid 65532), and no pip, build
#   tools, caches, apt lists, docs or man pages left behind. The image's first layers hold this: an upgrade
#   that changes only KGWE leaves them as they are.
# kgwe: KGWE's wheel installed into /opt/kgwe with the pinned installer (no pip in the image) and
#   precompiled: the last layer, all an upgrade of KGWE alone pulls.
set -eu

src=${1:?usage: install.sh SOURCE_DIR runtime | install.sh WHEEL_DIR kgwe}
step=${2:?usage: install.sh SOURCE_DIR runtime | install.sh WHEEL_DIR kgwe}
prefix=/opt/kgwe
uid=65532
# Only at build time: venv (for ensurepip's pip); purged at the end with what it pulled in.
build_packages="python3-venv"
# What KGWE runs: Python, git for the policy repositories (also over SSH), CA certificates for HTTPS.
runtime_packages="python3 git openssh-client ca-certificates"
# Big packages whose test suites are never imported at run time (numpy.testing lives outside tests/).
strip_tests="numpy scipy pandas statsmodels"

export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore
unset PIP_FIND_LINKS PYTHONDONTWRITEBYTECODE

# Precompile with unchecked-hash .pyc files: used without looking at the source's mtime, which image tools
# rewrite (buildah commit --timestamp, layer squashing); timestamp-checked ones would all be stale and
# recompiled at each start, and the image never writes bytecode.
compile() { py=$1; shift; "$py" -m compileall -q -f --invalidation-mode unchecked-hash "$@"; }

install_kgwe() {
    site=$("$prefix/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    set -- "$src"/installer-*.whl
    [ -f "$1" ] || { echo "install.sh: no installer wheel in $src" >&2; exit 1; }
    PYTHONPATH="$1" "$prefix/bin/python" -m installer --no-compile-bytecode "$src"/kgwe-*.whl
    compile "$prefix/bin/python" "$site/kgwe" >/dev/null
    "$prefix/bin/kgwe" --version
}

if [ "$step" = kgwe ]; then
    install_kgwe
    exit 0
fi
[ "$step" = runtime ] || { echo "install.sh: unknown step $step (runtime or kgwe)" >&2; exit 2; }

# 1. dpkg keeps no docs (but copyrights), man pages or translations: the same as debian:*-slim, so the
#    mmdebstrap route matches the Containerfile route's base.
cat > /etc/dpkg/dpkg.cfg.d/kgwe-slim <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF

# 2. Debian packages.
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $runtime_packages $build_packages
pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# 3. The runtime environment with the pinned dependencies: no pip inside; a throwaway build environment's
#    pip installs into it.
work=$(mktemp -d /tmp/kgwe-install.XXXXXX)
python3 -m venv "$work/build"
python3 -m venv --without-pip "$prefix"
"$work/build/bin/pip" --python "$prefix/bin/python" install -q --no-deps --no-compile \
    --require-hashes --only-binary=:all: -r "$src/hack/image/requirements.lock"
site=$("$prefix/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for pkg in $strip_tests; do
    if [ -d "$site/$pkg" ]; then find "$site/$pkg" -depth -type d -name tests -exec rm -rf {} +; fi
done
# The kubernetes client's asyncio twin (68 MB): KGWE uses only the synchronous client, which never imports it.
rm -rf "$site/kubernetes/aio"

# 4. Precompile every module, the standard library's too. (The standard library's own tests hold files that
#    are invalid on purpose, hence `|| true` there only.)
compile python3 "/usr/lib/python$pyver" >/dev/null 2>&1 || true
compile "$prefix/bin/python" "$prefix/lib" >/dev/null

# 5. The user the processes run as (the chart sets runAsUser 65532 too).
groupadd --system --gid "$uid" kgwe
useradd --system --uid "$uid" --gid "$uid" --home-dir /nonexistent --no-create-home \
    --shell /usr/sbin/nologin kgwe

# 6. Leave nothing of the build behind.
rm -rf "$work"
# shellcheck disable=SC2086
apt-get purge -y -q --auto-remove $build_packages "python$pyver-venv" python3-pip-whl
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old \
    /var/log/apt /var/log/dpkg.log /var/log/alternatives.log /root/.cache /tmp/* /var/tmp/*
find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find /usr/share/doc -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf /usr/share/man/* /usr/share/groff/* /usr/share/info/* /usr/share/lintian/* /usr/share/locale/*

# 7. It runs.
"$prefix/bin/python" -c 'import kubernetes, pydantic, yaml'
