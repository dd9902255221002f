#!/usr/bin/env bash
# Builds build/dist/gmem-VERSION-py3-none-manylinux_2_XX_x86_64.whl (make wheel; run after make):
#   gmem/                 the ctypes package (python/gmem), with gmem.pytest_plugin
#   gmem/_native/         the tree of `make install`'s bin/ and lib/: bin/gmem, lib/libgmem.so,
#                         lib/libgmem_client.so, lib/gmem/ (vendored elfutils, libunwind, liblzma,
#                         libbz2, zlib with $ORIGIN run paths; stripped of debug information)
#   entry points          console script `gmem` (gmem._cli:main, which execs _native/bin/gmem);
#                         pytest11 `gmem` = gmem.pytest_plugin
# auditwheel is not packaged by Debian and PyPI is not used, so this script does auditwheel's
# job itself: scripts/check-glibc.sh checks that every ELF file needs only glibc's libraries
# (the rest is vendored), no compiler runtime, and no GLIBC_ symbol version newer than
# packaging/glibc-min, which becomes the manylinux_2_XX tag (PEP 600). Packed with Debian's
# python3-wheel (`wheel pack`, which writes RECORD).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
VERSION=$(cat VERSION)
GLIBC=$(cat packaging/glibc-min)
TAG=py3-none-manylinux_${GLIBC/./_}_x86_64
PY=python3
$PY -c 'import wheel' 2>/dev/null || PY=/usr/bin/python3
$PY -c 'import wheel' 2>/dev/null ||
  { echo "build-wheel: error: no python3 with the wheel module (apt-get install python3-wheel)" >&2; exit 1; }

DIST_DIR=${DIST_DIR:-$BUILD/dist}
work=${WHEEL_WORK:-$BUILD/wheel}
rm -rf "$work"
mkdir -p "$work/tree" "$DIST_DIR"
BUILD=$BUILD scripts/stage.sh dist "$work/tree" >/dev/null
root=$work/root
pkg=$root/gmem
mkdir -p "$pkg/_native/lib"
cp python/gmem/*.py "$pkg/"
cp -a "$work/tree/bin" "$pkg/_native/"
cp -a "$work/tree/lib/"*.so "$work/tree/lib/gmem" "$pkg/_native/lib/"
echo "== build-wheel: checking the native files (what auditwheel would)"
scripts/check-glibc.sh "$pkg/_native" "$GLIBC"

info=$root/gmem-$VERSION.dist-info
mkdir -p "$info"
cat >"$info/METADATA" <<META
Metadata-Version: 2.1
Name: gmem
Version: $VERSION
Summary: GPU memory pool and tracer for unmodified CUDA programs: gmem run, leak and fragmentation reports, a ctypes API
Requires-Python: >=3.8
Platform: Linux x86-64, glibc >= $GLIBC
Description-Content-Type: text/markdown

$(cat README.md)
META
cat >"$info/WHEEL" <<META
Wheel-Version: 1.0
Generator: gmem scripts/build-wheel.sh
Root-Is-Purelib: false
Tag: $TAG
META
cat >"$info/entry_points.txt" <<'META'
[console_scripts]
gmem = gmem._cli:main

[pytest11]
gmem = gmem.pytest_plugin
META
echo "gmem" >"$info/top_level.txt"
find "$root" -name __pycache__ -prune -exec rm -rf {} +
rm -f "$DIST_DIR/gmem-$VERSION-"*.whl
$PY -m wheel pack "$root" --dest-dir "$DIST_DIR" >/dev/null
whl=$DIST_DIR/gmem-$VERSION-$TAG.whl
[ -f "$whl" ] || { echo "build-wheel: error: $whl was not written" >&2; exit 1; }
echo "build-wheel: $whl ($(du -h "$whl" | cut -f1))"
