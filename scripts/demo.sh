#!/usr/bin/env bash
# `make demo`: gmem's main job, start to finish. Builds what is needed, then
#   1. runs examples/leaky_pipeline (three leak sites, a fragmentation pattern) under
#      `gmem run`, and shows `gmem leaks` and `gmem frag` for it;
#   2. runs examples/voxelize, a batch ~4x larger than its GMEM_LIMIT, chunked with
#      gmem/chunking.hpp (planned, from a too-big chunk, streamed), and checks its checksum
#      against an unchunked run on a large limit.
# On a machine without a GPU everything runs on the simulated device (the fake libcuda.so.1
# from tests/fake_cuda: host memory behind the CUDA driver API); the first line says which.
# Environment: BUILD (build), MAKE (make), DEMO_LIMIT (24M), GMEM_DEMO_FORCE_FAKE=1.
set -u
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
LIMIT=${DEMO_LIMIT:-24M}
cd "$(dirname "$0")/.."

fake_dir=$BUILD/tests/fake_cuda
if [ "${GMEM_DEMO_FORCE_FAKE:-0}" != 1 ] && command -v nvidia-smi >/dev/null 2>&1 &&
   gpu=$(nvidia-smi -L 2>/dev/null | grep -m1 '^GPU'); then
  simulated=0
  echo "gmem demo: running on the GPU: $gpu"
else
  simulated=1
  echo "gmem demo: no GPU found (nvidia-smi lists none): running on the SIMULATED device," \
       "$fake_dir/libcuda.so.1 (host memory behind the CUDA driver API)"
fi

step() { printf '\n==== %s\n' "$*"; }
missing=()
build() { # target description: builds one target; records what could not be built
  if ! $MAKE --no-print-directory "$1" >"$BUILD/demo/build-$(basename "$1").log" 2>&1; then
    missing+=("$2")
    echo "gmem demo: could not build $2 ($1); see $BUILD/demo/build-$(basename "$1").log"
    return 1
  fi
}

mkdir -p "$BUILD/demo"
step "building (logs in $BUILD/demo/)"
build "$BUILD/lib/libgmem_client.so" "the client library" &&
  build examples "the examples" || { echo "gmem demo: cannot continue without the examples"; exit 1; }
have_shim=0 have_tool=0
build "$BUILD/lib/libgmem.so" "the shim libgmem.so" && have_shim=1
build "$BUILD/bin/gmem" "the gmem tool" && have_tool=1
if [ $simulated = 1 ]; then
  build "$fake_dir/libcuda.so.1" "the simulated device" ||
    { echo "gmem demo: cannot run without a GPU or the simulated device"; exit 1; }
  export LD_LIBRARY_PATH="$(realpath "$fake_dir")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FAKE_CUDA_TOTAL_BYTES=${FAKE_CUDA_TOTAL_BYTES:-2G}
fi
echo "gmem demo: built: client, examples$([ $have_shim = 1 ] && echo ", libgmem.so")$([ $have_tool = 1 ] && echo ", gmem")"

# Runs a program the way a user would: under `gmem run` when the tool exists, else with
# LD_PRELOAD (no summary), else bare (driver figures only).
run_gmem() {
  if [ $have_tool = 1 ]; then
    "$BUILD/bin/gmem" run -- "$@"
  elif [ $have_shim = 1 ]; then
    echo "gmem demo: (gmem tool not built: running with LD_PRELOAD=$BUILD/lib/libgmem.so)"
    LD_PRELOAD="$(realpath "$BUILD/lib/libgmem.so")" "$@"
  else
    echo "gmem demo: (libgmem.so not built: running without gmem; pool figures unavailable)"
    "$@"
  fi
}

status=0
trace=$(realpath "$BUILD/demo")/leaky_pipeline.trace
rm -f "$trace" "$BUILD/demo/voxelize.trace"
# The demo's programs save their traces beside its logs and leave nothing in /dev/shm.
export GMEM_TRACE_KEEP=none
step "1. leaks and fragmentation: gmem run -- $BUILD/examples/leaky_pipeline"
GMEM_TRACE_SAVE="$trace" run_gmem "$BUILD/examples/leaky_pipeline" || status=1
if [ $have_tool = 1 ] && [ -s "$trace" ]; then
  step "gmem leaks $trace"
  "$BUILD/bin/gmem" leaks --top 8 "$trace"
  rc=$?
  [ $rc -le 1 ] || status=1 # 1 = leaks found, which is the point
  step "gmem frag $trace"
  "$BUILD/bin/gmem" frag "$trace" || status=1
else
  echo "gmem demo: leak and fragmentation reports skipped: needs $BUILD/bin/gmem and a saved trace ($trace)"
fi

step "2. chunking: voxelize a 102 MiB batch under GMEM_LIMIT=$LIMIT"
GMEM_LIMIT=$LIMIT GMEM_TRACE_SAVE="$(realpath "$BUILD/demo")/voxelize.trace" \
  run_gmem "$BUILD/examples/voxelize" | tee "$BUILD/demo/voxelize-chunked.log"
chunked=$(sed -n 's/^voxelize: checksum=\([0-9a-f]*\).*/\1/p' "$BUILD/demo/voxelize-chunked.log")

step "2b. the same, starting from a chunk that is too big (--chunk 64): halve on OOM, grow back"
GMEM_LIMIT=$LIMIT GMEM_TRACE=0 run_gmem "$BUILD/examples/voxelize" --chunk 64 >"$BUILD/demo/voxelize-retry.log" 2>&1
grep -E '^voxelize: (plan|--chunk)' "$BUILD/demo/voxelize-retry.log"
grep -E 'OOMs so far' "$BUILD/demo/voxelize-retry.log" | head -6
echo "   ... (all of it in $BUILD/demo/voxelize-retry.log)"
grep -E '^voxelize: ([0-9]+ chunks|checksum)' "$BUILD/demo/voxelize-retry.log"
retried=$(sed -n 's/^voxelize: checksum=\([0-9a-f]*\).*/\1/p' "$BUILD/demo/voxelize-retry.log")

step "2c. streaming: the clouds from a source of unknown length, cost per cloud measured by gmem (--measure)"
GMEM_LIMIT=$LIMIT GMEM_TRACE=0 run_gmem "$BUILD/examples/voxelize" --measure >"$BUILD/demo/voxelize-stream.log" 2>&1
grep -E '^voxelize: (streamed|checksum)' "$BUILD/demo/voxelize-stream.log"
streamed=$(sed -n 's/^voxelize: checksum=\([0-9a-f]*\).*/\1/p' "$BUILD/demo/voxelize-stream.log")

step "2d. reference: the whole batch unchunked under GMEM_LIMIT=1G"
GMEM_LIMIT=1G GMEM_TRACE=0 run_gmem "$BUILD/examples/voxelize" --unchunked >"$BUILD/demo/voxelize-unchunked.log" 2>&1
reference=$(sed -n 's/^voxelize: checksum=\([0-9a-f]*\).*/\1/p' "$BUILD/demo/voxelize-unchunked.log")
grep '^voxelize: checksum' "$BUILD/demo/voxelize-unchunked.log"

echo
if [ -n "$reference" ] && [ "$chunked" = "$reference" ] && [ "$retried" = "$reference" ] &&
   [ "$streamed" = "$reference" ]; then
  echo "gmem demo: chunked ($LIMIT limit), OOM-retried, streamed and unchunked runs agree: checksum $reference"
else
  echo "gmem demo: MISMATCH: chunked '$chunked', retried '$retried', streamed '$streamed', unchunked '$reference'"
  status=1
fi
[ ${#missing[@]} -gt 0 ] && echo "gmem demo: not built, so parts were skipped: ${missing[*]}"
[ $simulated = 1 ] && echo "gmem demo: all of the above ran on the simulated device (no GPU here)."
exit $status
