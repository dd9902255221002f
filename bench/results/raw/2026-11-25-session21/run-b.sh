#!/usr/bin/env bash
# Session 21, GPU call B: base (main 2a32793) against new (cached-rule unwinder, shift ring
# lookup), interleaved in one run.
set -u
B=$PWD/.device/build
declare -A LIB=([base]=$PWD/.device/base/libgmem.so [new]=$B/lib/libgmem.so)
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== torch_alloc_cost (torch.empty pairs, no caching), 3 rounds, base/new interleaved"
for r in 1 2 3; do
  for v in base new; do
    for cfg in "GMEM_TRACE=0" "GMEM_TRACE=1"; do
      env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg python3 bench/workloads/torch_alloc_cost.py --label "$v $cfg" 2>&1 | tail -1
    done
  done
done
echo "== torch_alloc_cost, stacks apart"
for v in base new; do
  for cfg in "GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0" "GMEM_STACK_DEPTH=16 GMEM_PYTHON_DEPTH=0" "GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=16"; do
    env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg python3 bench/workloads/torch_alloc_cost.py --label "$v $cfg" 2>&1 | tail -1
  done
done
echo "== trace_bench new"
LD_LIBRARY_PATH=$B/lib $B/bench/trace_bench --runs 3 | tail -6
echo "== trace_cost (cudaMalloc pairs), defaults and trace off"
for r in 1 2; do
  for v in base new; do
    for cfg in "GMEM_TRACE=0" "GMEM_TRACE=1"; do
      env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none $cfg $B/bench/trace_cost 200000 "$v $cfg"
    done
  done
done
echo "== hook_bench defaults (driver API)"
for v in base new; do
  echo "-- $v"
  env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none timeout 60 $B/bench/hook_bench --api both --tests pair,random --sizes 512 --live 8 --random-sizes 256,4M --threads 1 --seconds 0.25 --max-samples 200000 2>&1 | grep -v gmem_stats | tail -8
done
echo "total $((SECONDS - start)) s"
} > $OUT/b.log 2>&1
