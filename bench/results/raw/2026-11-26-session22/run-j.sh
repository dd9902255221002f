#!/usr/bin/env bash
# Session 22, GPU call J: base (main at 361973b) against new (fence first; barrier query skip),
# the fast-step convnet under no caching + gmem, trace off then defaults, 4 interleaved rounds
# pinned to cores 2-5; GMEM_VERBOSE=1 for fences and barrier counters.
set -u
B=$PWD/.device/build
declare -A LIB=([base]=$PWD/.device/base/libgmem.so [new]=$B/lib/libgmem.so)
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4; do
  for v in base new; do
    for cfg in "GMEM_TRACE=0" "GMEM_TRACE=1"; do
      out=$(env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
        taskset -c 2-5 python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1)
      sps=$(echo "$out" | grep -o '"steps_per_s": [0-9.]*' | head -1)
      c=$(echo "$out" | grep -E "^gmem: (pool device=0 kind=device|host_time|barriers)" | grep -oE "(peak_reserved_bytes|fences|fence_ns|busy)=[0-9]+" | tr '\n' ' ')
      echo "round $r $v $cfg: $sps | $c"
    done
  done
done
for v in base new; do
  taskset -c 2-5 env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 \
    python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1 | grep -o '"steps_per_s": [0-9.]*' | sed "s/^/$v again /"
  taskset -c 2-5 python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1 | grep -o '"steps_per_s": [0-9.]*' | sed "s/^/torch caching /"
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/j.log 2>&1
