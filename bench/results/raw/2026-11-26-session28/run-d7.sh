#!/bin/bash
# Session 28, call 7: issue 13 point 1's loop (trace_cost: one thread, cudaMalloc/cudaFree pairs
# 256 B - 4 MiB, 8 live, no kernels), main against the fence-batch build, trace off, runtime and
# driver routes, 4 interleaved rounds; then the defaults (trace on), 2 rounds each.
# Carried: .device/build (as call 6).
set -u
L=$PWD/.device/build/lib
T=$PWD/.device/build/bench/trace_cost
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4; do for route in runtime driver; do for lib in libgmem.so libgmem-new.so; do
  env LD_PRELOAD=$L/$lib GMEM_TRACE_KEEP=none GMEM_TRACE=0 taskset -c 3 $T 200000 "r$r $route $lib trace off" $route
done; done; done
for r in 1 2; do for lib in libgmem.so libgmem-new.so; do
  env LD_PRELOAD=$L/$lib GMEM_TRACE_KEEP=none taskset -c 3 $T 200000 "r$r runtime $lib defaults" runtime
done; done
for lib in libgmem.so libgmem-new.so; do
  env LD_PRELOAD=$L/$lib GMEM_TRACE_KEEP=none GMEM_TRACE=0 taskset -c 3 $T 200000 "driver $lib trace off, split" driver split
done
} > $OUT/d7-trace_cost.log 2>&1
