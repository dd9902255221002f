# Sourced by the GPU test scripts. Finds libgmem.so ($GMEM_BUILD/lib, default build/lib), builds
# the CUDA test programs with nvcc into $GMEM_BUILD/tests/gpu when missing or older than their
# source, and runs programs under the shim with GMEM_VERBOSE=1 (counters at exit).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${GMEM_BUILD:-$root/build}
shim=$build/lib/libgmem.so
bin=$build/tests/gpu
mkdir -p "$bin"
NVCC=${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}
[ -f "$shim" ] || { echo "no $shim: run make first"; exit 1; }
# The trace is tested by the profiler's own tests; these runs keep /dev/shm clean.
export GMEM_TRACE=${GMEM_TRACE:-0}

# build_cu OUTPUT SOURCE [nvcc flags...]
build_cu() {
  local out=$bin/$1 src=$here/$2
  shift 2
  if [ ! -x "$out" ] || [ "$src" -nt "$out" ]; then
    [ -x "$NVCC" ] || { echo "skipped: no nvcc to build $1 (set NVCC or CUDA_HOME)"; exit 77; }
    "$NVCC" -O2 -std=c++17 -arch=sm_90 "$@" "$src" -o "$out" || { echo "nvcc failed for $src"; exit 1; }
  fi
}

# with_shim CMD...: runs CMD preloaded, counters at exit on stderr.
with_shim() { env LD_PRELOAD="$shim" GMEM_VERBOSE=1 "$@"; }

# pooled LOG MIN: the log shows a device pool with at least MIN allocations.
pooled() {
  local n
  n=$(sed -n 's/^gmem: pool device=[0-9]* kind=device .* total_allocs=\([0-9]*\) .*/\1/p' "$1" | sort -n | tail -1)
  if [ -z "$n" ] || [ "$n" -lt "$2" ]; then
    echo "FAIL: expected >= $2 allocations through the pool, saw '${n:-none}' ($1)"
    return 1
  fi
  echo "pool served $n device allocations"
}
