#!/bin/bash
# Session 27, call 1: trace format 4 (event lanes, 4f8c5e9 = "new") against main before it
# (7c412cf; its libgmem.so is .device/w4's, 7d21781, the same library code = "base"). Carried:
# .device/s27 (both libraries, both trace_bench builds, trace_cost and stream_alloc_bench from
# session 26's bundle: their sources did not change).
#  1. trace_bench (no GPU), every row, --runs 3, 3 interleaved rounds, pinned to core 3.
#  2. trace_cost 200000 pairs, driver route, defaults / GMEM_STACK_DEPTH=0 / GMEM_TRACE=0.
#  3. torch_alloc_cost.py --pairs 200000 (torch.empty pairs, no caching), defaults / trace off.
#  4. stream_alloc_bench 1/4/16 threads, cudaMallocAsync with kernels in flight, defaults.
set -u
N=$PWD/.device/s27
declare -A LIB=([base]=$N/base/lib/libgmem.so [new]=$N/new/lib/libgmem.so)
declare -A TB=([base]=$N/base/trace_bench [new]=$N/new/trace_bench)
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/c1-device.log
lscpu | grep -E "Model name|^CPU\(s\)" >> $OUT/c1-device.log
{
for r in 1 2 3; do for v in base new; do
  echo "== $v round $r"
  taskset -c 3 ${TB[$v]} --runs 3 2>&1
done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c1-trace_bench.log 2>&1
{
for r in 1 2 3; do for v in base new; do for cfg in GMEM_TRACE=1 GMEM_STACK_DEPTH=0 GMEM_TRACE=0; do
  env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none $cfg taskset -c 3 $N/trace_cost 200000 "$v r$r $cfg" driver 2>&1 | grep '"label"' | grep -v "fenced\|did not"
done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c1-trace_cost.log 2>&1
{
for r in 1 2 3; do for v in base new; do for cfg in GMEM_TRACE=1 GMEM_TRACE=0; do
  env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg taskset -c 3 \
    python3 bench/workloads/torch_alloc_cost.py --pairs 200000 --label "$v r$r $cfg" 2>&1 | grep kind
done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c1-torch.log 2>&1
J=$OUT/c1-stream.jsonl
: > $J
{
common=(--threads 1,4,16 --seconds 0.5 --random-sizes 256,4M --live 8 --json $J)
for r in 1 2; do
  $N/stream_alloc_bench --method floor --label floor "${common[@]}" >/dev/null
  $N/stream_alloc_bench --method cudaMallocAsync --label cudaMallocAsync "${common[@]}" >/dev/null
  for v in base new; do
    env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none $N/stream_alloc_bench --method cudaMallocAsync --label gmem-defaults-$v "${common[@]}" >/dev/null 2>&1 || echo "$v round $r rc=$?"
    env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 $N/stream_alloc_bench --method cudaMallocAsync --label gmem-traceoff-$v "${common[@]}" >/dev/null 2>&1 || echo "$v off round $r rc=$?"
  done
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c1-stream.log 2>&1
ls /dev/shm | head > $OUT/c1-shm-after.log
