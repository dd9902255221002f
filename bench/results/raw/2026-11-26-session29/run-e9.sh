#!/bin/bash
# Session 29, call 9: a thread's cache giving back only what takes it under its bounds (16
# blocks, 8 MiB), not the oldest half (.device/new2: main + that change) against main
# (e04e4e3's bundle, .device/build), trace off, 3 rounds with the order alternating:
# trace_cost async (one thread, 200,000 pairs, core 3), hook_bench async random (128 blocks
# live, 256 B - 4 MiB, 1/4/16 threads) and stream_alloc_bench through cudaMallocAsync at
# 1/4/16 threads beside the launch floor and native cudaMallocAsync (0.5 s per cell).
# Carried: .device/build, .device/new2.
set -u
N=$PWD/.device/build/tests/gpu
B=$PWD/.device/build/bench
declare -A LIB=([main]=$PWD/.device/build/lib/libgmem.so [bound]=$PWD/.device/new2/libgmem.so)
J=$OUT/e9-stream.jsonl
: > $J
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
common=(--threads 1,4,16 --seconds 0.5 --random-sizes 256,4M --live 8 --json $J)
for r in 1 2 3; do
  order="main bound"; [ $((r % 2)) = 0 ] && order="bound main"
  $N/stream_alloc_bench --method floor --label "r$r floor" "${common[@]}" >/dev/null
  $N/stream_alloc_bench --method cudaMallocAsync --label "r$r cudaMallocAsync" "${common[@]}" >/dev/null
  for v in $order; do
    taskset -c 3 env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 $B/trace_cost 200000 "r$r $v async" async
    env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 GMEM_TRACE_KEEP=none $B/hook_bench --api async \
      --threads 1,4,16 --tests random --live 128 --random-sizes 256,4M --seconds 0.5 2>&1 \
      | grep -v '^{' | sed "s/^/r$r $v /"
    env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 $N/stream_alloc_bench --method cudaMallocAsync \
      --label "r$r $v" "${common[@]}" >/dev/null || echo "$v round $r rc=$?"
  done
done
} > $OUT/e9.log 2>&1
