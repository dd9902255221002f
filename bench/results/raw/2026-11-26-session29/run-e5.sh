#!/bin/bash
# Session 29, call 5: issue 13 point 1 on its own program (bench/trace_cost.cu, built here with
# the new `async` route): one thread, log-uniform 256 B - 4 MiB, 8 live, 200,000 pairs, trace
# off; the cudaMalloc path (runtime), the driver route, and the stream-ordered path
# (cudaMallocAsync/cudaFreeAsync on one non-blocking stream), natively and under gmem; the clock
# pair alone. 4 interleaved rounds on core 3. Carried: .device/build (main 9788128), .device/exp.
set -u
L=$PWD/.device/build/lib/libgmem.so
T=.device/exp/trace_cost
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4; do
  taskset -c 3 $T 200000 "r$r timer" timer
  taskset -c 3 $T 200000 "r$r native-async" async
  taskset -c 3 env LD_PRELOAD=$L GMEM_TRACE=0 $T 200000 "r$r gmem-async" async
  taskset -c 3 env LD_PRELOAD=$L GMEM_TRACE=0 $T 200000 "r$r gmem-runtime" runtime
  taskset -c 3 env LD_PRELOAD=$L GMEM_TRACE=0 $T 200000 "r$r gmem-driver" driver
done
taskset -c 3 $T 20000 "native-runtime" runtime
env LD_PRELOAD=$L GMEM_TRACE=0 GMEM_VERBOSE=1 $T 200000 "gmem-async verbose" async 2>&1 | grep -E "trace_cost|pool device=0 kind=device|events|pool_lock" | cut -c1-700
} > $OUT/e5.log 2>&1
