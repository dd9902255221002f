#!/bin/bash
# Session 25, call 3 (H100): where a cudaMalloc pair's time goes under gmem, trace off:
# gmem's counters (GMEM_VERBOSE=1), then perf samples by library and function, driver and
# runtime routes.
set -u
W=$PWD/.device/w; P=$PWD/.device/perf
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for route in driver runtime; do
  echo "== $route: counters"
  env LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none GMEM_TRACE=0 GMEM_VERBOSE=1 taskset -c 3 \
    $W/bench/trace_cost 200000 "gmem $route verbose" $route 2>&1 | cut -c1-900
  echo "== $route: perf"
  LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/$route.data -F 20000 -- env -u LD_LIBRARY_PATH \
    LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none GMEM_TRACE=0 taskset -c 3 \
    $W/bench/trace_cost 400000 "gmem $route perf" $route
  LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/$route.data -n --no-children --stdio --sort dso 2>/dev/null | grep "%" | head -12
  LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/$route.data -n --no-children --stdio --sort dso,sym 2>/dev/null | grep "%" | head -45
  rm -f $OUT/$route.data
done
} > $OUT/a3.log 2>&1
