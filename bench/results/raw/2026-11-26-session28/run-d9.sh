#!/bin/bash
# Session 28, call 9: are the losses identical with the fence batch? The small convnet (200
# steps) and the GPT loop (12 steps) under PyTorch's caching allocator, no caching + gmem main
# and no caching + gmem with the fence batch; rusage_run.py prints each run's losses' count,
# last value and an md5 of the whole list. Carried: .device/build (821e47a's bundle, i.e. the
# fence batch, as libgmem.so) and .device/main/libgmem.so (98e7d89's).
set -u
D=bench/results/raw/2026-11-26-session28
B=$PWD/.device/build/lib
M=$PWD/.device/main
export PYTHONUNBUFFERED=1
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for w in "smallconv 200" "gpt 12"; do
  set -- $w
  A="bench/workloads/torch_train.py --model $1 --steps $2"
  python3 $D/rusage_run.py "$1 caching" -- python3 $A
  env LD_PRELOAD=$M/libgmem.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 python3 $D/rusage_run.py "$1 main" -- python3 $A
  env LD_PRELOAD=$B/libgmem.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 python3 $D/rusage_run.py "$1 batch4" -- python3 $A
  env LD_PRELOAD=$B/libgmem.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 $D/rusage_run.py "$1 batch4 defaults" -- python3 $A
done
} > $OUT/d9.log 2>&1
