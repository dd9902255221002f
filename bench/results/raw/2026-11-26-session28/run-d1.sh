#!/bin/bash
# Session 28, call 1: where the small convnet's tracing cost goes (issue 12 point 2). The small
# convnet for 1000 steps, no caching + gmem, 4 interleaved rounds of four configurations: trace
# off, the defaults, stacks off (GMEM_STACK_DEPTH=0) and native stacks without Python frames
# (GMEM_PYTHON_DEPTH=0); each run's user/system CPU time, page faults and context switches
# (rusage_run.py). Then trace_bench without stacks. Carried: .device/build (main at the
# commit named in the results file).
set -u
D=bench/results/raw/2026-11-26-session28
L=$PWD/.device/build/lib/libgmem.so
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -i "model name"
for r in 1 2 3 4; do
  for cfg in "off GMEM_TRACE=0" "on GMEM_TRACE=1" "nostacks GMEM_STACK_DEPTH=0" "nopython GMEM_PYTHON_DEPTH=0"; do
    set -- $cfg
    env LD_PRELOAD=$L GMEM_TRACE_KEEP=none GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 $2 \
      python3 $D/rusage_run.py "r$r $1" -- taskset -c 2-9 python3 bench/workloads/torch_train.py \
      --model smallconv --steps 1000 2>>$OUT/d1-gmem.log
  done
  echo "t=$((SECONDS - start))"
done
for r in 1 2; do
  taskset -c 3 .device/build/bench/trace_bench --runs 3 --only off
  taskset -c 3 .device/build/bench/trace_bench --runs 3 --only nostacks
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/d1-convnet.log 2>&1
