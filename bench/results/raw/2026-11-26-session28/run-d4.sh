#!/bin/bash
# Session 28, call 4 (asked for an H200): the time stamp's cost (rdtsc_cost.c) and trace_bench's
# rows off / stamps / nostacks, then the small convnet for 1000 steps, 3 interleaved rounds of:
# PyTorch's caching allocator; no caching + gmem with the trace off, with the defaults, with
# stacks off; and with GMEM_REUSE_SAFETY=0 and the trace off (no fences: a diagnostic, unsafe).
# Carried: .device/build (main + the trace_bench stamps row; rdtsc_cost in .device/build/bench).
set -u
D=bench/results/raw/2026-11-26-session28
B=$PWD/.device/build
L=$B/lib/libgmem.so
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -i "model name"
taskset -c 3 $B/bench/rdtsc_cost
for r in 1 2; do
  for row in off stamps nostacks; do taskset -c 3 $B/bench/trace_bench --runs 3 --only $row | tail -1; done
done
echo "t=$((SECONDS - start))"
run() { # label, then environment
  local label=$1; shift
  env "$@" python3 $D/rusage_run.py "$label" -- taskset -c 2-9 python3 bench/workloads/torch_train.py \
    --model smallconv --steps 1000 2>>$OUT/d4-gmem.log
}
for r in 1 2 3; do
  run "r$r caching" X=1
  run "r$r off" LD_PRELOAD=$L GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0
  run "r$r on" LD_PRELOAD=$L GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1
  run "r$r nostacks" LD_PRELOAD=$L GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_STACK_DEPTH=0
  run "r$r nofence" LD_PRELOAD=$L GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 GMEM_REUSE_SAFETY=0
  echo "t=$((SECONDS - start))"
done
ls /dev/shm
echo "elapsed $((SECONDS - start)) s"
} > $OUT/d4.log 2>&1
