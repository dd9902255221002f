#!/usr/bin/env bash
# Session 24, call 7: base (main 1246937) against new (bc154ab): the fast-step convnet under no
# caching + gmem, trace off then defaults, 3 interleaved rounds pinned to cores 2-5.
set -u
declare -A LIB=([base]=$PWD/.device/prof/base/libgmem.so [new]=$PWD/.device/prof/lib/libgmem.so)
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3; do
  for v in base new; do
    for cfg in "GMEM_TRACE=0" "GMEM_TRACE=1"; do
      sps=$(env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
        taskset -c 2-5 python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1 | grep -o '"steps_per_s": [0-9.]*' | head -1)
      echo "round $r $v $cfg: $sps"
    done
  done
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/p7.log 2>&1
