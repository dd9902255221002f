#!/bin/bash
# Session 23, GPU call P: where 16 threads wait. Pool lock contention counters (GMEM_VERBOSE
# pool_lock line), stream_alloc_bench 16 threads stream-ordered and cudaMalloc, defaults and
# GMEM_TRACE=0; hook_bench on the fake driver (no GPU work) 1/4/16 threads.
set -u
B=$PWD/.device/build
X=$B/tests/gpu/stream_alloc_bench
L=$B/lib/libgmem.so
{
for cfg in GMEM_TRACE=0 GMEM_X=1; do
  for m in cudaMallocAsync cudaMalloc; do
    for t in 4 16; do
      echo "== $cfg $m $t threads"
      env $cfg GMEM_VERBOSE=1 GMEM_TRACE_KEEP=none LD_PRELOAD=$L $X --method $m --threads $t --seconds 1 --random-sizes 256,4M --live 8 2>&1 | grep -E "mean|pool_lock|barriers|events"
    done
  done
done
for t in 1 4 16; do
  echo "== fake async $t"
  LD_LIBRARY_PATH=$B/tests/fake_cuda GMEM_VERBOSE=1 GMEM_TRACE=0 LD_PRELOAD=$L $B/bench/hook_bench --api async --tests random --random-sizes 256,4M --live 8 --threads $t --seconds 0.5 2>&1 | grep -E "async  |pool_lock"
done
} > $OUT/p.log 2>&1
