#!/usr/bin/env bash
# One GPU session: make test-gpu on the bundle, then the cost benchmarks. Logs to $OUT.
set -u
B=$PWD/.device/build
L=$OUT
S_OUT=/tmp/gl; rm -rf $S_OUT; mkdir -p $S_OUT
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/summary.txt
start=$SECONDS
BUILD=$B OUT=$S_OUT timeout ${TESTS_S:-320} scripts/gpu-session.sh tests > $L/session.log 2>&1
echo "session rc=$? after $((SECONDS - start)) s" >> $L/summary.txt
grep -E "^(ok|FAIL|skip|tests:|memory_viz)" $L/session.log >> $L/summary.txt
(cd $B/bench && LD_LIBRARY_PATH=../lib timeout 90 ./trace_bench --runs 3) > $L/trace_bench.txt 2>&1
lib=$B/lib/libgmem.so
for rep in 1 2; do
  timeout 30 $B/bench/trace_cost 200000 native
  GMEM_TRACE_KEEP=none LD_PRELOAD=$lib GMEM_TRACE=0 timeout 30 $B/bench/trace_cost 200000 gmem-trace-off
  GMEM_TRACE_KEEP=none LD_PRELOAD=$lib GMEM_STACK_DEPTH=0 timeout 30 $B/bench/trace_cost 200000 gmem-stacks-off
  GMEM_TRACE_KEEP=none LD_PRELOAD=$lib timeout 30 $B/bench/trace_cost 200000 gmem-default
done > $L/trace_cost.jsonl 2>&1
for rep in 1; do
  timeout 40 python3 bench/workloads/torch_alloc_cost.py --label torch-caching
  for m in "GMEM_TRACE=0 gmem-trace-off" "GMEM_STACK_DEPTH=0 gmem-stacks-off" "GMEM_X=1 gmem-default"; do
    set -- $m
    env GMEM_TRACE_KEEP=none LD_PRELOAD=$lib PYTORCH_NO_CUDA_MEMORY_CACHING=1 $1 timeout 40 \
      python3 bench/workloads/torch_alloc_cost.py --label $2
  done
done > $L/torch_alloc_cost.jsonl 2>&1
S=$B/tests/gpu/stream_alloc_bench
for m in floor cudaMallocAsync cub cudaMalloc; do
  timeout 40 $S --method $m --label $m --threads 1,4,16 --seconds 0.5 --random-sizes 256,4M --live 8
done > $L/stream.txt 2>&1
for m in cudaMallocAsync cudaMalloc; do
  GMEM_TRACE=0 LD_PRELOAD=$lib timeout 40 $S --method $m --label gmem-notrace-$m --threads 1,4,16 --seconds 0.5 --random-sizes 256,4M --live 8
  LD_PRELOAD=$lib GMEM_TRACE_KEEP=none timeout 40 $S --method $m --label gmem-default-$m --threads 1,4,16 --seconds 0.5 --random-sizes 256,4M --live 8
done >> $L/stream.txt 2>&1
echo "total $((SECONDS - start)) s" >> $L/summary.txt
tar czf $OUT/logs.tgz -C $S_OUT . 2>/dev/null
