#!/bin/bash
# Session 25, call 9 (H200): base (b0c022d, .device/w) against new (.device/w2: the recording
# cuts and the pool's skip of the thread-cache lookup when no cache exists):
# trace_cost driver route, trace off and defaults, 3 interleaved rounds; then the three
# workloads with the new build, trace off against defaults, 4 interleaved rounds.
set -u
declare -A LIB=([base]=$PWD/.device/w/lib [new]=$PWD/.device/w2/lib)
T=$PWD/.device/w/bench/trace_cost
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3; do for v in base new; do for cfg in GMEM_TRACE=0 GMEM_TRACE=1; do
  env LD_PRELOAD=${LIB[$v]}/libgmem.so GMEM_TRACE_KEEP=none $cfg taskset -c 3 $T 200000 "$v r$r $cfg" driver
done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/a9-trace_cost.jsonl 2>&1
{
for r in 1 2 3 4; do
  for m in "smallconv 1000" "gpt 40" "convnet 30"; do
    set -- $m
    for cfg in GMEM_TRACE=0 GMEM_TRACE=1; do
      sps=$(env LD_PRELOAD=${LIB[new]}/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
        taskset -c 2-9 python3 bench/workloads/torch_train.py --model $1 --steps $2 2>&1 | grep -o '"steps_per_s": [0-9.]*' | head -1)
      echo "round $r $1 $cfg: $sps   (t=$((SECONDS - start)))"
    done
  done
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/a9-workloads.log 2>&1
