#!/bin/bash
# Session 24, call 3: base (main 1246937) against new (per-thread rule copies in the stack walk,
# prefetch of the ring's next record): torch.empty pairs and trace_bench, interleaved.
set -u
B=$PWD/.device/prof
declare -A LIB=([base]=$B/base/libgmem.so [new]=$B/lib/libgmem.so)
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== torch_alloc_cost pinned (taskset -c 3), 4 rounds, 150000 pairs"
for r in 1 2 3 4; do
  for v in base new; do
    for cfg in "GMEM_TRACE=0" "GMEM_TRACE=1"; do
      env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --pairs 150000 --label "$v $cfg" 2>&1 | tail -1
    done
  done
done
echo "== trace_bench, 2 rounds"
for r in 1 2; do for v in base new; do
  echo "-- $v"; taskset -c 3 $B/bench/trace_bench-$v --runs 2 | tail -6
done; done
} > $OUT/p3.log 2>&1
