#!/bin/bash
# Session 28, call 14: the small convnet's speed against PyTorch's caching allocator, 6
# interleaved rounds (1000 steps, cores 2-9): caching; no caching + gmem main (98e7d89) with the
# trace off; the fence batch with the trace off; the fence batch with the defaults.
# Carried: .device/build (821e47a's bundle) and .device/main.
set -u
D=bench/results/raw/2026-11-26-session28
M=$PWD/.device/main/libgmem.so
N=$PWD/.device/build/lib/libgmem.so
export PYTHONUNBUFFERED=1
start=$SECONDS
SC="bench/workloads/torch_train.py --model smallconv --steps 1000"
run() { local label=$1; shift
  env "$@" python3 $D/rusage_run.py "$label" -- taskset -c 2-9 python3 $SC; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4 5 6; do
  run "r$r caching" X=1
  run "r$r main" LD_PRELOAD=$M PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 GMEM_TRACE_KEEP=none
  run "r$r batch4" LD_PRELOAD=$N PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 GMEM_TRACE_KEEP=none
  run "r$r batch4-defaults" LD_PRELOAD=$N PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE_KEEP=none
  echo "t=$((SECONDS - start))"
done
} > $OUT/d14.log 2>&1
