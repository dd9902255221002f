#!/bin/bash
# Session 26, call 3: trace_cost with `split` (gmem's fence counter read before and after each
# pair, outside the timed span): the pairs during which the pool fenced against the others,
# driver and runtime routes, trace off (2 rounds), trace off with GMEM_BARRIERS=0, defaults.
# Carried: .device/build (main's build and trace_cost with split).
set -u
L=$PWD/.device/build/lib
T=$PWD/.device/build/bench/trace_cost
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do for route in driver runtime; do
  env LD_PRELOAD=$L/libgmem.so GMEM_TRACE_KEEP=none GMEM_TRACE=0 taskset -c 3 $T 200000 "r$r $route trace off" $route split
done; done
env LD_PRELOAD=$L/libgmem.so GMEM_TRACE_KEEP=none GMEM_TRACE=0 GMEM_BARRIERS=0 taskset -c 3 $T 200000 "driver trace off, GMEM_BARRIERS=0" driver split
env LD_PRELOAD=$L/libgmem.so GMEM_TRACE_KEEP=none taskset -c 3 $T 200000 "driver defaults" driver split
env LD_PRELOAD=$L/libgmem.so GMEM_TRACE_KEEP=none GMEM_TRACE=0 taskset -c 3 $T 200000 "driver trace off, no split" driver
} > $OUT/b2-trace_cost.log 2>&1
