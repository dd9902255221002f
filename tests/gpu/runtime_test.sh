#!/usr/bin/env bash
# nvcc programs, static (default) and shared runtime, doing mixed cudaMalloc/cudaMallocAsync/
# cudaMallocHost work with kernels on several streams: same checked results with and without
# libgmem.so, and the pool served the allocations.
source "$(dirname "$0")/lib.sh"
build_cu mixed_alloc mixed_alloc.cu
build_cu mixed_alloc_shared mixed_alloc.cu -cudart shared
fail=0
for prog in mixed_alloc mixed_alloc_shared; do
  log=$bin/$prog.log
  "$bin/$prog" || { echo "FAIL: $prog without the shim"; fail=1; }
  with_shim "$bin/$prog" >"$log" 2>&1
  rc=$?
  cat "$log" | cut -c1-300
  [ $rc -eq 0 ] && grep -q "mixed_alloc: OK" "$log" || { echo "FAIL: $prog under the shim (exit $rc)"; fail=1; }
  pooled "$log" 1000 || fail=1
  grep -q "kind=host .* total_allocs=[1-9]" "$log" || { echo "FAIL: $prog: no pinned host allocations pooled"; fail=1; }
done
exit $fail
