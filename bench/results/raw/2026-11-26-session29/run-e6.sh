#!/bin/bash
# Session 29, call 6: the thread cache's one-compare scan (e04e4e3, .device/new) against main
# (9788128, .device/build), trace off, 3 interleaved rounds on the stream-ordered path:
# trace_cost's async route (one thread, 256 B - 4 MiB, 8 live, 200,000 pairs, core 3), hook_bench
# async (fixed sizes and the random test), and stream_alloc_bench through cudaMallocAsync at
# 1/4/16 threads beside the launch floor and native cudaMallocAsync (0.5 s per cell).
# Carried: .device/build, .device/new, .device/exp (trace_cost and hook_bench built here).
set -u
N=$PWD/.device/build/tests/gpu
declare -A LIB=([main]=$PWD/.device/build/lib/libgmem.so [new]=$PWD/.device/new/libgmem.so)
J=$OUT/e6-stream.jsonl
: > $J
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
common=(--threads 1,4,16 --seconds 0.5 --random-sizes 256,4M --live 8 --json $J)
for r in 1 2 3; do
  for v in main new; do
    taskset -c 3 env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 .device/exp/trace_cost 200000 "r$r $v async" async
  done
  for v in new main; do
    taskset -c 3 env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 GMEM_TRACE_KEEP=none .device/exp/hook_bench \
      --api async --threads 1 --tests pair,random --sizes 512,1048576 2>&1 | grep -v '^{' | sed "s/^/r$r $v /"
  done
  $N/stream_alloc_bench --method floor --label "r$r floor" "${common[@]}" >/dev/null
  $N/stream_alloc_bench --method cudaMallocAsync --label "r$r cudaMallocAsync" "${common[@]}" >/dev/null
  for v in main new; do
    env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 $N/stream_alloc_bench --method cudaMallocAsync --label "r$r $v" "${common[@]}" >/dev/null || echo "$v round $r rc=$?"
  done
done
} > $OUT/e6.log 2>&1
python3 - "$J" <<'PY' >> $OUT/e6.log
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows[:1]: print(sorted(r.keys()))
PY
