#!/bin/bash
# Session 28, call 10: issue 13 point 2's program (stream_alloc_bench: 1/4/16 threads, each its
# own stream, a fill and a check kernel per allocation, 256 B - 4 MiB, 8 live) with the fence
# batch against main, trace off, through cudaMallocAsync and through cudaMalloc, beside the
# launch floor and native cudaMallocAsync; 2 interleaved rounds.
# Carried: .device/build (the fence batch, 821e47a's bundle) and .device/main (98e7d89's lib).
set -u
N=$PWD/.device/build/tests/gpu
declare -A LIB=([main]=$PWD/.device/main/libgmem.so [batch4]=$PWD/.device/build/lib/libgmem.so)
J=$OUT/d10-stream.jsonl
: > $J
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
common=(--threads 1,4,16 --seconds 0.5 --random-sizes 256,4M --live 8 --json $J)
for r in 1 2; do
  $N/stream_alloc_bench --method floor --label "r$r floor" "${common[@]}" >/dev/null
  $N/stream_alloc_bench --method cudaMallocAsync --label "r$r cudaMallocAsync" "${common[@]}" >/dev/null
  for v in main batch4; do for m in cudaMallocAsync cudaMalloc; do
    env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 GMEM_VERBOSE=1 $N/stream_alloc_bench --method $m --label "r$r $v $m" "${common[@]}" >/dev/null 2>>$OUT/d10-gmem.log || echo "$v $m round $r rc=$?"
  done; done
done
} > $OUT/d10-stream.log 2>&1
