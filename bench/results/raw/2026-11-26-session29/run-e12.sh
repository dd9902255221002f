#!/bin/bash
# Session 29, call 12: the session's two cache changes with gmem's DEFAULT options (trace and
# stacks on): the final library (ce46ecb's bundle, .device/build) against 9788128's
# (.device/mainlib), 4 rounds with the order alternating, core 3: trace_cost's async route
# (stream-ordered, one thread, 200,000 pairs) and its runtime route (cudaMalloc, which the
# changes do not touch: a control), mean / p50 / p99. Carried: .device/build, .device/mainlib.
set -u
declare -A LIB=([main]=$PWD/.device/mainlib/libgmem.so [final]=$PWD/.device/build/lib/libgmem.so)
B=$PWD/.device/build/bench
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4; do
  order="main final"; [ $((r % 2)) = 0 ] && order="final main"
  for v in $order; do
    for route in async runtime; do
      taskset -c 3 env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none $B/trace_cost 200000 "r$r $v $route defaults" $route
    done
  done
done
} > $OUT/e12.log 2>&1
ls /dev/shm | wc -l >> $OUT/e12.log
