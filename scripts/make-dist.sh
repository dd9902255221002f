#!/usr/bin/env bash
# `make dist` (run after make): the relocatable release tarball
#   $DIST_DIR/gmem-VERSION-linux-x86_64.tar.gz   (DIST_DIR default build/dist)
# holding the tree of `make install` (scripts/stage.sh dist: $ORIGIN run paths, helper
# libraries in lib/gmem/, pkg-config and CMake files relative to themselves, INSTALL), checked
# by scripts/check-glibc.sh against packaging/glibc-min. Where nvcc is, it also builds the CUDA
# test program that scripts/gpu-install-check.sh runs from the extracted tarball on a GPU
# machine, $DIST_DIR/gpu-check/mixed_alloc (sm_90 code plus PTX); it is not in the tarball.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DIST_DIR=${DIST_DIR:-$BUILD/dist}
VERSION=$(cat VERSION)
name=gmem-$VERSION-linux-x86_64
mkdir -p "$DIST_DIR"
rm -rf "${DIST_DIR:?}/$name" "$DIST_DIR/$name.tar.gz"
BUILD=$BUILD scripts/stage.sh dist "$DIST_DIR/$name"
scripts/check-glibc.sh "$DIST_DIR/$name" >"$DIST_DIR/$name.glibc.txt" ||
  { cat "$DIST_DIR/$name.glibc.txt"; exit 1; }
tail -1 "$DIST_DIR/$name.glibc.txt"
tar -C "$DIST_DIR" --owner=0 --group=0 --numeric-owner --sort=name -czf "$DIST_DIR/$name.tar.gz" "$name"
rm -rf "${DIST_DIR:?}/$name"
echo "dist: $DIST_DIR/$name.tar.gz ($(du -h "$DIST_DIR/$name.tar.gz" | cut -f1))"

NVCC=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
if [ -x "$NVCC" ]; then
  mkdir -p "$DIST_DIR/gpu-check"
  "$NVCC" -O2 -std=c++17 -gencode arch=compute_90,code='[sm_90,compute_90]' \
    tests/gpu/mixed_alloc.cu -o "$DIST_DIR/gpu-check/mixed_alloc"
  echo "dist: $DIST_DIR/gpu-check/mixed_alloc (for scripts/gpu-install-check.sh)"
else
  echo "dist: note: no nvcc ($NVCC): no gpu-check program; scripts/gpu-install-check.sh" \
       "will look for .device/build/tests/gpu/mixed_alloc (scripts/gpu-bundle.sh)"
fi
