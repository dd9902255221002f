#!/usr/bin/env bash
# Makes DEST (default .device/build, git-ignored): the part of a build that a GPU machine with
# no compilers' libraries or package registry needs to run `make test-gpu GMEM_PREBUILT=1`,
# the examples and scripts/gpu-run.sh — the shim, the tool and the libraries they load
# beside themselves (stripped), the examples, the API probe, and the nvcc-built GPU test
# programs (compiled here with -arch=sm_90). Run after `make`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEST=${1:-.device/build}
NVCC=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
rm -rf "$DEST"
mkdir -p "$DEST"/{lib,bin,bench,examples,tests/api,tests/gpu,tests/tools,tests/exporter}
for f in libgmem.so libgmem_client.so libunwind.so.8 liblzma.so.5 libdw.so.1 libelf.so.1 libbz2.so.1.0; do
  cp -L "$BUILD/lib/$f" "$DEST/lib/"
done
strip --strip-debug "$DEST/lib/libgmem.so"
mkdir -p "$DEST/tests/gpu/noop_barrier"   # tests/gpu/noop_barrier_test.sh
cp "$BUILD/tests/gpu/noop_barrier/libgmem.so" "$DEST/tests/gpu/noop_barrier/"
strip --strip-debug "$DEST/tests/gpu/noop_barrier/libgmem.so"
cp -r "$BUILD/lib/gmem" "$DEST/lib/"   # the Python bootstrap (interpose/python_bootstrap.h)
chmod -R go-w "$DEST/lib/gmem"
cp "$BUILD/bin/gmem" "$DEST/bin/" && strip --strip-debug "$DEST/bin/gmem"
cp "$BUILD/examples/leaky_pipeline" "$BUILD/examples/voxelize" "$DEST/examples/"
cp "$BUILD/tests/api/api_probe" "$DEST/tests/api/"
cp "$BUILD/tests/tools/leak_sites" "$DEST/tests/tools/"               # tests/gpu/oom_growth_test.sh
cp "$BUILD/tests/exporter/steady_service" "$DEST/tests/exporter/"
cp "$BUILD/bench/trace_bench" "$DEST/bench/"
cp "$BUILD/bench/page_prep_wait" "$DEST/bench/"   # the host kernel's page-mapping waits (no GPU use)
mkdir -p "$DEST/bench/leaks" && cp "$BUILD/bench/leaks/native_programs" "$DEST/bench/leaks/"   # tests/gpu/leak_bench_test.sh
nv() { "$NVCC" -O2 -std=c++17 -arch=sm_90 "$@"; }
nv tests/gpu/mixed_alloc.cu -o "$DEST/tests/gpu/mixed_alloc" &
nv tests/gpu/mixed_alloc.cu -cudart shared -o "$DEST/tests/gpu/mixed_alloc_shared" &
wait
nv tests/gpu/reuse_hazard.cu -o "$DEST/tests/gpu/reuse_hazard" &
nv tests/gpu/pair_cost.cu -o "$DEST/tests/gpu/pair_cost" &
wait
nv -I. bench/trace_cost.cu -L"${CUDA_HOME:-/usr/local/cuda}/lib64/stubs" -lcuda -o "$DEST/bench/trace_cost" &
nv -I. bench/stream_alloc_bench.cu -o "$DEST/tests/gpu/stream_alloc_bench" &
wait
# The programs the GPU tests build with build_cu (tests/gpu/lib.sh), prebuilt so a run spends
# its device time on the tests, two at a time (the build machine has two cores).
nv tests/gpu/graph_memory.cu -o "$DEST/tests/gpu/graph_memory" &
nv tests/gpu/ipc_pair.cu -o "$DEST/tests/gpu/ipc_pair" &
wait
nv tests/gpu/private_context.cu -L"${CUDA_HOME:-/usr/local/cuda}/lib64/stubs" -lcuda -o "$DEST/tests/gpu/private_context" &
nv tests/gpu/strict_barrier.cu -o "$DEST/tests/gpu/strict_barrier" &
wait
nv tests/gpu/capture_fence.cu -o "$DEST/tests/gpu/capture_fence" &
nv -I. bench/probes/barrier_cost.cu -L"${CUDA_HOME:-/usr/local/cuda}/lib64/stubs" -lcuda -o "$DEST/bench/barrier_cost" &
wait
nv -I. bench/probes/contended_barrier.cu -L"${CUDA_HOME:-/usr/local/cuda}/lib64/stubs" -lcuda -o "$DEST/bench/contended_barrier" &
wait
nv tests/gpu/thirdparty_mix.cu -o "$DEST/tests/gpu/thirdparty_mix" &
nv tests/gpu/thirdparty_mix.cu -cudart shared -o "$DEST/tests/gpu/thirdparty_mix_shared" &
wait
nv tests/gpu/stitch.cu -ldl -o "$DEST/tests/gpu/stitch"
du -sh "$DEST"
