#!/bin/bash
# Session 28, call 2: are the pool's fences on the small convnet's critical path? The small
# convnet for 1000 steps, 3 interleaved rounds: PyTorch's caching allocator (no gmem), no
# caching + gmem with the trace off, and the same with GMEM_REUSE_SAFETY=0 (no fences at all:
# unsafe, a diagnostic only). Carried: .device/build (main, as call 1).
set -u
D=bench/results/raw/2026-11-26-session28
L=$PWD/.device/build/lib/libgmem.so
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3; do
  python3 $D/rusage_run.py "r$r caching" -- taskset -c 2-9 python3 bench/workloads/torch_train.py \
    --model smallconv --steps 1000
  for cfg in "gmem-off GMEM_REUSE_SAFETY=1" "gmem-nofence GMEM_REUSE_SAFETY=0"; do
    set -- $cfg
    env LD_PRELOAD=$L GMEM_TRACE=0 GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 $2 \
      python3 $D/rusage_run.py "r$r $1" -- taskset -c 2-9 python3 bench/workloads/torch_train.py \
      --model smallconv --steps 1000 2>>$OUT/d2-gmem.log
  done
  echo "t=$((SECONDS - start))"
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/d2-convnet.log 2>&1
