#!/usr/bin/env bash
# Session 21, GPU call E: the fast-step convnet under no caching + gmem, base (main 2a32793)
# against new, trace off and defaults, 3 interleaved rounds; GMEM_VERBOSE=1 for the unwinder's
# counters at exit.
set -u
B=$PWD/.device/build
declare -A LIB=([base]=$PWD/.device/base/libgmem.so [new]=$B/lib/libgmem.so)
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3; do
  for v in base new; do
    for cfg in "GMEM_TRACE=0" "GMEM_TRACE=1"; do
      out=$(env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
        python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1)
      sps=$(echo "$out" | grep -o '"steps_per_s": [0-9.]*' | head -1)
      st=$(echo "$out" | grep "gmem: stacks" | head -1)
      echo "round $r $v $cfg: $sps | $st"
    done
  done
done
env LD_PRELOAD=${LIB[new]} GMEM_TRACE_KEEP=none GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  python3 bench/workloads/torch_alloc_cost.py --label new-verbose 2>&1 | grep -E "torch_alloc_cost|gmem: stacks"
echo "total $((SECONDS - start)) s"
} > $OUT/e.log 2>&1
