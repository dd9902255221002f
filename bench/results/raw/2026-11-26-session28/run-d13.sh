#!/bin/bash
# Session 28, call 13 (the H200 of calls 10-12): issue 12 point 2 with the final library (the
# fence batch): the small convnet (1000 steps), the GPT loop (40) and ResNet-50 (30), no caching
# + gmem, trace off against the defaults, 3 interleaved rounds, cores 2-9 (session 25's
# run-a9.sh protocol). Carried: .device/build (821e47a's bundle).
set -u
D=bench/results/raw/2026-11-26-session28
L=$PWD/.device/build/lib/libgmem.so
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3; do
  for m in "smallconv 1000" "gpt 40" "convnet 30"; do
    set -- $m
    for cfg in GMEM_TRACE=0 GMEM_TRACE=1; do
      env LD_PRELOAD=$L GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
        python3 $D/rusage_run.py "r$r $1 $cfg" -- taskset -c 2-9 python3 bench/workloads/torch_train.py --model $1 --steps $2
    done
  done
  echo "t=$((SECONDS - start))"
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/d13-workloads.log 2>&1
