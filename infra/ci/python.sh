#!/usr/bin/env bash
# Build CPython from Debian's source tarball into a prefix, for testing Agency on a Python
# the system lacks: infra/ci/python.sh [VERSION [PREFIX]] (default 3.13 and
# /opt/agency-pythonVERSION). Does nothing when PREFIX already has a working interpreter.
# The tarball is the newest one of package pythonVERSION that Debian's Sources index of SUITE
# (default trixie, the stable release: its files stay served) names and the archive serves, its sha256 checked against that index.
# Built without PGO: a test interpreter, not a production one.
set -euo pipefail

want=${1:-3.13}
prefix=${2:-/opt/agency-python$want}
suite=${SUITE:-trixie}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
python=$prefix/bin/python$want
modules="ssl, sqlite3, ctypes, lzma, bz2, zlib, readline, uuid, dbm.gnu, venv, ensurepip"

if "$python" -c "import $modules" 2>/dev/null; then
  echo "$("$python" --version) already in $prefix"
  exit 0
fi

deps=(build-essential pkg-config xz-utils curl libssl-dev zlib1g-dev libffi-dev libsqlite3-dev
  libbz2-dev liblzma-dev libreadline-dev uuid-dev libgdbm-dev libgdbm-compat-dev libncurses-dev)
missing=()
for dep in "${deps[@]}"; do
  [ "$(dpkg-query -W -f '${db:Status-Status}' "$dep" 2>/dev/null)" = installed ] || missing+=("$dep")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# python$want's upstream tarballs in the suite's index, "VERSION SHA256 FILE", highest first;
# the first the archive serves is built (an index can name a file the mirror has not got yet)
curl -fsSL --retry 3 -o Sources.xz "$mirror/dists/$suite/main/source/Sources.xz"
candidates=$(xz -dc Sources.xz | awk -v want="python$want" '
  /^Package: / { pkg = $2; tarball = "" }
  /^Checksums-Sha256:/ { sums = 1; next }
  /^[^ ]/ { sums = 0 }
  pkg == want && sums && index($3, want "_") == 1 && $3 ~ /\.orig\.tar\.xz$/ { sha = $1; tarball = $3 }
  pkg == want && tarball != "" && /^Directory: / {
    v = substr(tarball, length(want) + 2); sub(/\.orig\.tar\.xz$/, "", v)
    print v, sha, $2 "/" tarball
  }' | sort -rV)
version=
while read -r v sha256 file; do
  [ -n "$v" ] || continue
  if curl -fsSL --retry 3 -o src.tar.xz "$mirror/$file"; then
    echo "$sha256  src.tar.xz" | sha256sum -c --quiet -
    version=$v
    break
  fi
  echo "$mirror/$file is not served, trying an older one" >&2
done <<<"$candidates"
[ -n "$version" ] || { echo "no python$want source to download from $suite" >&2; exit 1; }

echo "building Python $version ($suite) into $prefix"
tar -xJf src.tar.xz
cd "Python-$version"

start=$SECONDS
./configure --prefix="$prefix" --with-ensurepip=install --disable-test-modules >configure.log ||
  { tail -n 30 configure.log >&2; exit 1; }
make -j"$(nproc)" >make.log 2>&1 || { tail -n 50 make.log >&2; exit 1; }
make install >install.log 2>&1 || { tail -n 50 install.log >&2; exit 1; }
"$python" -c "import $modules"
echo "$("$python" --version) built into $prefix in $((SECONDS - start))s"
