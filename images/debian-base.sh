#!/usr/bin/env bash
# Make a base image from Debian packages alone, for hosts that reach no container registry (CI, air-gapped builders):
#
#   images/debian-base.sh TAG [SUITE]        # e.g. images/debian-base.sh localhost/trtwarm-base:bookworm
#
# mmdebstrap (minbase + python3, python3-venv, ca-certificates) → `podman import`, about half a minute. The host's
# extra CA certificates (/usr/local/share/ca-certificates/*.crt) are trusted inside too, so pip in a build behind a
# TLS-inspecting proxy works as on the host. Use it as both bases:
#   images/build.sh init TAG --build-arg BASE_IMAGE=localhost/trtwarm-base:bookworm \
#     --build-arg PYTHON_IMAGE=localhost/trtwarm-base:bookworm --build-arg TENSORRT_PACKAGE= --network host
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 TAG [SUITE]" >&2
  exit 2
fi
tag=$1 suite=${2:-bookworm}
engine=${ENGINE:-podman}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates --quiet \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='mkdir -p "$1/usr/local/share/ca-certificates"' \
  --customize-hook='cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/" 2>/dev/null || true' \
  --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  "$suite" "$work/rootfs.tar"
"$engine" import --quiet --change 'CMD ["/bin/bash"]' "$work/rootfs.tar" "$tag" >/dev/null
echo "$tag"
