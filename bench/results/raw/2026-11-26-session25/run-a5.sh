#!/bin/bash
# Session 25, call 5: the fast-step convnet under PyTorch's caching allocator (a), expandable
# segments, and no caching + gmem with the trace off (c), 3 interleaved rounds of 1000 steps;
# then gmem's counters for one run (GMEM_VERBOSE=1): fences, barriers and their cost.
set -u
W=$PWD/.device/w
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { taskset -c 2-9 python3 bench/workloads/torch_train.py --model smallconv --steps 1000 2>&1 | grep -o '"steps_per_s": [0-9.]*\|"losses": \[[^]]*' | tr '\n' ' ' | cut -c1-160; echo; }
for r in 1 2 3; do
  echo -n "round $r a: "; run
  echo -n "round $r expandable: "; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run
  echo -n "round $r c: "; LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 run
done
echo "== counters (c, 1000 steps)"
env LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 GMEM_VERBOSE=1 \
  taskset -c 2-9 python3 bench/workloads/torch_train.py --model smallconv --steps 1000 2>&1 | grep -E "steps_per_s|^gmem: (pool device=0 kind=device|barriers|host_time|pool_lock|events)" | cut -c1-700
echo "elapsed $((SECONDS - start)) s"
} > $OUT/a5.log 2>&1
