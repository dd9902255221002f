#!/bin/bash
# Session 26, call 5: main (7d21781, .device/w4) against a prefetch variant of the pool's fence
# completion (.device/w6: while one pending block merges, the next one's neighbours are
# prefetched), trace_cost driver route with split, trace off, 4 interleaved rounds.
# Carried: .device/w4, .device/w6, .device/build (for trace_cost).
set -u
declare -A LIB=([main]=$PWD/.device/w4/lib [pf]=$PWD/.device/w6/lib)
T=$PWD/.device/build/bench/trace_cost
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4; do for v in main pf; do
  env LD_PRELOAD=${LIB[$v]}/libgmem.so GMEM_TRACE_KEEP=none GMEM_TRACE=0 taskset -c 3 $T 200000 "$v r$r" driver split
done; done
} > $OUT/b3-trace_cost.log 2>&1
