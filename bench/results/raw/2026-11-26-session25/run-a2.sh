#!/bin/bash
# Session 25, call 2 (H100): trace_bench ablations; trace_cost by route (timer, driver, runtime),
# trace off and defaults; the three workloads, trace off against defaults, 4 interleaved rounds.
set -u
W=$PWD/.device/w; A=$PWD/.device/abl
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nproc; lscpu | grep -E "Model name|L2|L3"
for r in 1 2; do
  echo "== ablation round $r"
  $A/tb-BASE --runs 2 --only off | tail -1
  for v in BASE NOCAS NOLIVE NOTICK NOAPPEND ALL; do echo -n "$v "; $A/tb-$v --runs 2 --only nostacks | tail -1; done
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/a2-ablation.log 2>&1
{
for r in 1 2 3; do
  $W/bench/trace_cost 200000 "timer" timer
  $W/bench/trace_cost 20000 "native driver" driver
  $W/bench/trace_cost 20000 "native runtime" runtime
  for route in driver runtime; do
    for cfg in GMEM_TRACE=0 GMEM_STACK_DEPTH=0 GMEM_TRACE=1; do
      env LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none $cfg taskset -c 3 \
        $W/bench/trace_cost 200000 "gmem $route $cfg" $route
    done
  done
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/a2-trace_cost.jsonl 2>&1
{
for r in 1 2 3 4; do
  for m in "smallconv 1000" "gpt 40" "convnet 30"; do
    set -- $m
    for cfg in GMEM_TRACE=0 GMEM_TRACE=1; do
      sps=$(env LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
        taskset -c 2-9 python3 bench/workloads/torch_train.py --model $1 --steps $2 2>&1 | grep -o '"steps_per_s": [0-9.]*' | head -1)
      echo "round $r $1 $cfg: $sps   (t=$((SECONDS - start)))"
    done
  done
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/a2-workloads.log 2>&1
