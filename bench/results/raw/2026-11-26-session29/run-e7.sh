#!/bin/bash
# Session 29, call 7: the thread cache's one-compare scan (e04e4e3's bundle, .device/build)
# against main (9788128's library, .device/mainlib) on the stream-ordered path, trace off, 4
# rounds with the order of the two builds alternating: trace_cost's async route (one thread,
# 256 B - 4 MiB, 8 live, 200,000 pairs) and hook_bench async (512 B and 1 MiB pairs, the random
# test), core 3. Then make test-gpu on the bundle (scripts/gpu-session.sh tests).
# Carried: .device/build (with trace_cost and hook_bench built here), .device/mainlib.
set -u
declare -A LIB=([main]=$PWD/.device/mainlib/libgmem.so [new]=$PWD/.device/build/lib/libgmem.so)
B=$PWD/.device/build/bench
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4; do
  order="main new"; [ $((r % 2)) = 0 ] && order="new main"
  for v in $order; do
    taskset -c 3 env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 $B/trace_cost 200000 "r$r $v async" async
    taskset -c 3 env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 GMEM_TRACE_KEEP=none $B/hook_bench \
      --api async --threads 1 --tests pair,random --sizes 512,1048576 2>&1 | grep -v '^{' | sed "s/^/r$r $v /"
  done
done
} > $OUT/e7.log 2>&1
OUT=$OUT bash scripts/gpu-session.sh tests > $OUT/e7-test-gpu-session.log 2>&1
tail -5 $OUT/e7-test-gpu-session.log
