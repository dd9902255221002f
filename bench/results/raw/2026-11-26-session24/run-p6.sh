#!/bin/bash
# Session 24, call 6: make test-gpu on the final build, then torch.empty pairs, base vs new.
set -u
B=$PWD/.device/prof
declare -A LIB=([base]=$B/base/libgmem.so [new]=$PWD/.device/build/lib/libgmem.so)
OUT=$OUT timeout 420 bash scripts/gpu-session.sh tests > $OUT/tests.log 2>&1; echo "gpu-session rc=$?" >> $OUT/tests.log
{
echo "== torch_alloc_cost pinned (taskset -c 3), 3 rounds, 60000 pairs"
for r in 1 2 3; do
  for v in base new; do
    for cfg in "GMEM_TRACE=0" "GMEM_TRACE=1"; do
      env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --pairs 60000 --label "$v $cfg" 2>&1 | tail -1
    done
  done
done
} > $OUT/p6.log 2>&1
