#!/usr/bin/env bash
# `make host-packages`: the Debian packages the real node, the image build and the real-node tests use, installed
# once with apt-get (as root) when any is missing. `make test` and `make bins` run it before anything runs in
# parallel: apt-get holds a machine-wide lock, so two installs at once fail ("Could not get lock").
#
# The one list of them (command or file -> package). hack/node-bins.sh and hack/image/build.sh run it too, so
# `kgwe cluster up` and `make image` work on a new host; after `make host-packages` those runs install nothing.
# The real-node tests only check for busybox and name this target.
#
#   hack/host-packages.sh           install what is missing
#   hack/host-packages.sh --check   exit 1 and name what is missing, installing nothing
set -euo pipefail

declare -A packages=(
    [runc]=runc                       # the real node's OCI runtime
    [nft]=nftables                    # kube-proxy's nftables mode, the node's teardown
    [iptables]=iptables               # CNI portmap / masquerade chains
    [ip]=iproute2                     # the node's bridge and network namespaces
    [/bin/busybox]=busybox-static     # the real-node tests' pod image
    [mmdebstrap]=mmdebstrap           # the image's base layer (make image)
    [buildah]=buildah                 # the image's layers
    [skopeo]=skopeo                   # pushing the image, reading archives
    [/usr/share/keyrings/debian-archive-keyring.gpg]=debian-archive-keyring
    [gcc]=gcc                         # the pause binary (static)
    [/usr/include/stdio.h]=libc6-dev  # gcc -static's libc
)

missing=()
for what in "${!packages[@]}"; do
    if [[ "$what" == /* ]]; then
        [[ -e "$what" ]] && continue
    else
        PATH="$PATH:/usr/sbin:/sbin" command -v "$what" >/dev/null 2>&1 && continue
    fi
    missing+=("${packages[$what]}")
done
(( ${#missing[@]} == 0 )) && exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [[ "${1:-}" == "--check" ]]; then
    echo "host-packages: missing ${missing[*]}: run \`make host-packages\` (as root)" >&2
    exit 1
fi
[[ "$(id -u)" -eq 0 ]] || { echo "host-packages: run \`sudo apt-get install ${missing[*]}\`" >&2; exit 1; }
command -v apt-get >/dev/null 2>&1 || { echo "host-packages: no apt-get here: install ${missing[*]}" >&2; exit 1; }
echo "host-packages: installing ${missing[*]} with apt-get" >&2
apt-get update -q >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
