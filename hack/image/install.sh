#!/bin/sh
# Install KGWE into a Debian trixie root filesystem. This is the one install step of both image routes,
# so they cannot drift: `make image` (hack/image/build.sh) runs it as root inside an mmdebstrap chroot,
# the Containerfile runs it on debian:trixie-slim.
#
#   install.sh SOURCE_DIR     SOURCE_DIR: the repository's files (read only; copied before building)
#
# Result: Debian's python3 with KGWE in the virtual environment /opt/kgwe, every dependency at the version
# and hash pinned in hack/image/requirements.lock (binary wheels only: no compiler is ever installed),
# .pyc precompiled (the image runs with PYTHONDONTWRITEBYTECODE on a read-only root), a non-root user
# kgwe (uid/gid 65532), and no pip, build tools, caches, apt lists, docs or man pages left behind.
set -eu

src=${1:?usage: install.sh SOURCE_DIR}
prefix=/opt/kgwe
uid=65532
# Only at build time: venv (for ensurepip's pip); purged at the end with what it pulled in.
build_packages="python3-venv"
# What KGWE runs: Python, git for the policy repositories (also over SSH), CA certificates for HTTPS.
runtime_packages="python3 git openssh-client ca-certificates"
# Big packages whose test suites are never imported at run time (numpy.testing lives outside tests/).
strip_tests="numpy scipy pandas statsmodels networkx"

export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore
unset PIP_FIND_LINKS PYTHONDONTWRITEBYTECODE

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

# 3. KGWE's wheel, built with the pinned build backend in a throwaway environment.
work=$(mktemp -d /tmp/kgwe-install.XXXXXX)
cp -a "$src/." "$work/src"
python3 -m venv "$work/build"
"$work/build/bin/pip" install -q --require-hashes --only-binary=:all: --no-deps \
    -r "$work/src/hack/image/build-requirements.lock"
"$work/build/bin/pip" wheel -q --no-deps --no-build-isolation --wheel-dir "$work/wheel" "$work/src"

# 4. The runtime environment: no pip inside; the build environment's pip installs into it.
python3 -m venv --without-pip "$prefix"
pip_into() { "$work/build/bin/pip" --python "$prefix/bin/python" install -q --no-deps --no-compile "$@"; }
pip_into --require-hashes --only-binary=:all: -r "$work/src/hack/image/requirements.lock"
pip_into --no-index "$work"/wheel/kgwe-*.whl
site=$("$prefix/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for pkg in $strip_tests; do
    if [ -d "$site/$pkg" ]; then find "$site/$pkg" -depth -type d -name tests -exec rm -rf {} +; fi
done
# The kubernetes client's asyncio twin (68 MB): KGWE uses only the synchronous client, which never imports it.
rm -rf "$site/kubernetes/aio"

# 5. Precompile every module, the standard library's too: the image never writes bytecode. Unchecked-hash
#    .pyc files are used without looking at the source's mtime, which image tools rewrite (buildah commit
#    --timestamp, layer squashing); timestamp-checked ones would all be stale and recompiled at each start.
#    (The standard library's own tests hold files that are invalid on purpose, hence `|| true` there only.)
python3 -m compileall -q -f --invalidation-mode unchecked-hash "/usr/lib/python$pyver" >/dev/null 2>&1 || true
"$prefix/bin/python" -m compileall -q -f --invalidation-mode unchecked-hash "$prefix/lib" >/dev/null

# 6. The user the processes run as (deploy/ sets runAsUser 65532 too).
groupadd --system --gid "$uid" kgwe
useradd --system --uid "$uid" --gid "$uid" --home-dir /nonexistent --no-create-home \
    --shell /usr/sbin/nologin kgwe

# 7. Leave nothing of the build behind.
rm -rf "$work"
# shellcheck disable=SC2086
apt-get purge -y -q --auto-remove $build_packages "python$pyver-venv" python3-pip-whl
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old \
    /var/log/apt /var/log/dpkg.log /var/log/alternatives.log /root/.cache /tmp/* /var/tmp/*
find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find /usr/share/doc -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf /usr/share/man/* /usr/share/groff/* /usr/share/info/* /usr/share/lintian/* /usr/share/locale/*

# 8. It runs.
"$prefix/bin/kgwe" --version
