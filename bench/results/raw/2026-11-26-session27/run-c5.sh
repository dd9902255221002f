#!/bin/bash
# Session 27, call 5 (H200): new rebuilt at b6ee8f7 (the writer's code is c2's; an owned
# record's words are release stores instead of stores after a fence: the same instructions on
# x86). (1) trace_bench base/new, 1 thread (4 rounds) and 4/8 threads (2 rounds), as call 2;
# (2) the fast-step convnet under no caching + gmem, base and new, trace off then defaults,
# 4 interleaved rounds. Carried: .device/s27.
set -u
N=$PWD/.device/s27
declare -A LIB=([base]=$N/base/lib/libgmem.so [new]=$N/new/lib/libgmem.so)
declare -A TB=([base]=$N/base/trace_bench [new]=$N/new/trace_bench)
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/c5-device.log
lscpu | grep -E "Model name|^CPU\(s\)" >> $OUT/c5-device.log
{
for r in 1 2 3 4; do for v in base new; do for row in off nostacks; do
  echo "== $v round $r threads 1 $row: $(taskset -c 3 ${TB[$v]} --runs 3 --only $row 2>&1 | tail -1)"
done; done; done
for t in 4 8; do for r in 1 2; do for v in base new; do for row in off nostacks; do
  echo "== $v round $r threads $t $row: $(taskset -c 2-9 ${TB[$v]} --runs 3 --threads $t --first-lap 100000 --only $row 2>&1 | tail -1)"
done; done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c5-trace_bench.log 2>&1
export PYTHONUNBUFFERED=1
{
for r in 1 2 3 4; do for v in base new; do for cfg in GMEM_TRACE=0 GMEM_TRACE=1; do
  out=$(env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
    taskset -c 2-5 python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1)
  echo "round $r $v $cfg: $(echo "$out" | grep -o '"steps_per_s": [0-9.]*' | head -1)"
done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c5-convnet.log 2>&1
