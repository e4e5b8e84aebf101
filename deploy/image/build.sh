#!/usr/bin/env bash
# Build Agency's OCI image with podman: a Debian base made by mmdebstrap from Debian's
# packages (cached as localhost/agency-base:bookworm), then Agency's wheel and its
# dependencies in a venv, run as a non-root user.
#   deploy/image/build.sh [TAG]      (default: localhost/agency:VERSION, also :latest)
# AGENCY_IMAGE_REBUILD_BASE=1 makes the base again.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}
python=${PYTHON:-.venv/bin/python}
version=$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
tag=${1:-localhost/agency:$version}
base=localhost/agency-base:bookworm
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ "${AGENCY_IMAGE_REBUILD_BASE:-0}" = 1 ] || ! podman image exists "$base"; then
  echo "making the base with mmdebstrap..." >&2
  mmdebstrap --quiet --variant=minbase --mode=root \
    --include=python3,python3-venv,ca-certificates,tini,bubblewrap \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
    bookworm "$work/base.tar"
  podman import --change 'CMD ["/bin/bash"]' "$work/base.tar" "$base" >/dev/null
  rm -f "$work/base.tar"
fi

echo "building the wheels..." >&2
mkdir -p "$work/context/wheels"
"$python" -m pip wheel --quiet --disable-pip-version-check -w "$work/context/wheels" .
cp deploy/image/Containerfile deploy/image/container.py "$work/context/"

echo "building $tag..." >&2
podman build --quiet --format docker --build-arg BASE="$base" --build-arg VERSION="$version" \
  -t "$tag" -t localhost/agency:latest -f "$work/context/Containerfile" "$work/context"
echo "$tag"
