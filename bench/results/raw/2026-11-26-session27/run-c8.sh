#!/bin/bash
# Session 27, call 8: issue 12 point 2 with the final build (.device/build at a416e3c), the way
# session 25's run-a9.sh measured it: the small convnet (1000 steps), the GPT loop (40) and
# ResNet-50 (30), no caching + gmem, trace off against the defaults, 4 interleaved rounds,
# cores 2-9. Carried: .device/build.
set -u
L=$PWD/.device/build/lib/libgmem.so
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4; do
  for m in "smallconv 1000" "gpt 40" "convnet 30"; do
    set -- $m
    for cfg in GMEM_TRACE=0 GMEM_TRACE=1; do
      sps=$(env LD_PRELOAD=$L GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
        taskset -c 2-9 python3 bench/workloads/torch_train.py --model $1 --steps $2 2>&1 | grep -o '"steps_per_s": [0-9.]*' | head -1)
      echo "round $r $1 $cfg: $sps   (t=$((SECONDS - start)))"
    done
  done
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c8-workloads.log 2>&1
