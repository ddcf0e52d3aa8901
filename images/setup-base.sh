#!/bin/sh
# Prepare any base image for trtwarm (runs as root inside `docker build`): Python 3.10+ with a working venv
# (python3-venv apt-installed where the base lacks it), and the non-root account TRTWARM_UID:TRTWARM_GID.
# An account or group that already has those ids (ubuntu:24.04's `ubuntu`, Triton's `triton-server`) is reused
# rather than colliding with it: in Kubernetes the Pod's runAsUser decides anyway, and the name does not matter.
set -eu
uid=$1
gid=$2
if ! python3 -m venv /tmp/venv-probe >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: BASE_IMAGE has no python3 with a working venv, and no apt-get to install python3-venv" >&2
    exit 1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv
  rm -rf /var/lib/apt/lists/*
fi
rm -rf /tmp/venv-probe
python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else
    "error: trtwarm needs Python 3.10+; BASE_IMAGE has " + sys.version.split()[0])'
if [ "$uid" = 0 ]; then
  echo "error: TRTWARM_UID must not be 0 (the images run as non-root)" >&2
  exit 1
fi
getent group "$gid" >/dev/null || groupadd --gid "$gid" trtwarm
getent passwd "$uid" >/dev/null \
  || useradd --uid "$uid" --gid "$gid" --no-create-home --home-dir /home/trtwarm --shell /usr/sbin/nologin trtwarm
mkdir -p /home/trtwarm
chown "$uid:$gid" /home/trtwarm
echo "trtwarm runs as $(getent passwd "$uid" | cut -d: -f1) (uid $uid)," \
  "group $(getent group "$gid" | cut -d: -f1) (gid $gid)"
