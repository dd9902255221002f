#!/usr/bin/env bash
# Session 21, GPU call A: where the per-pair time goes (trace and hook path), before changes.
set -u
B=$PWD/.device/build
lib=$B/lib/libgmem.so
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)|MHz"
echo "== trace_bench: base (main 2a32793) then new, twice"
for r in 1 2; do
  LD_LIBRARY_PATH=$B/lib $B/bench/trace_bench_base --runs 2 | tail -5
  LD_LIBRARY_PATH=$B/lib $B/bench/trace_bench --runs 2 | tail -6
done
echo "== trace_bench, event ring kept in cache (4096 events)"
GMEM_TRACE_EVENTS=4096 LD_LIBRARY_PATH=$B/lib $B/bench/trace_bench --runs 2 --first-lap 20000 --only nostacks | tail -1
echo "== trace_cost (cudaMalloc pairs through the runtime)"
for cfg in "GMEM_TRACE=0" "GMEM_TRACE=0 GMEM_ARENA=0" "GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0" "GMEM_TRACE=1"; do
  env LD_PRELOAD=$lib GMEM_TRACE_KEEP=none $cfg $B/bench/trace_cost 200000 "$cfg"
done
echo "== hook_bench (driver API, real driver)"
for cfg in "GMEM_TRACE=0" "GMEM_TRACE=0 GMEM_ARENA=0" "GMEM_TRACE=1"; do
  echo "-- $cfg"
  env LD_PRELOAD=$lib GMEM_TRACE_KEEP=none $cfg timeout 60 $B/bench/hook_bench --api both --tests pair,random --sizes 512,1M --live 8 --random-sizes 256,4M --threads 1 --seconds 0.25 --max-samples 200000 2>&1 | tail -12
done
echo "== python_frames_bench --torch (ctypes cuMemAlloc pairs, Python depth 20)"
for cfg in "GMEM_TRACE=0" "GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0" "GMEM_STACK_DEPTH=16 GMEM_PYTHON_DEPTH=0" "GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=16" "GMEM_TRACE=1"; do
  for rel in --released ""; do
    echo -n "$cfg $rel: "; env LD_PRELOAD=$lib GMEM_TRACE_KEEP=none $cfg python3 bench/python_frames_bench.py --torch $rel 50000 20 2>&1 | tail -1
  done
done
echo "== torch_alloc_cost (torch.empty pairs, no caching)"
for r in 1 2; do
  for cfg in "GMEM_TRACE=0" "GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0" "GMEM_STACK_DEPTH=16 GMEM_PYTHON_DEPTH=0" "GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=16" "GMEM_TRACE=1"; do
    env LD_PRELOAD=$lib GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg python3 bench/workloads/torch_alloc_cost.py --label "$cfg" 2>&1 | tail -1
  done
done
echo "total $((SECONDS - start)) s"
} > $OUT/a.log 2>&1
