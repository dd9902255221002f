#!/bin/bash
# Session 28, call 11 (an H200 came): the time stamp's cost and trace_bench's off / stamps /
# nostacks rows (2 rounds); trace_cost main against the fence batch (trace off, driver and
# runtime routes, 2 rounds); the small convnet (1000 steps, 2 rounds) and the GPT loop (40
# steps, 1 round) and CuPy (200 steps, 1 round) with PyTorch's allocators / CuPy's pool, gmem
# main and gmem with the fence batch (trace off), NVML peaks; then the convnet with the fence
# batch and the defaults (trace on), 2 rounds.
# Carried: .device/build (821e47a's bundle: the fence batch) and .device/main (98e7d89's lib).
set -u
D=bench/results/raw/2026-11-26-session28
B=$PWD/.device/build
M=$PWD/.device/main/libgmem.so
N=$B/lib/libgmem.so
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -i "model name"
taskset -c 3 $B/bench/rdtsc_cost
for r in 1 2; do
  for row in off stamps nostacks; do taskset -c 3 $B/bench/trace_bench --runs 3 --only $row | tail -1; done
done
for r in 1 2; do for route in driver runtime; do for v in main batch4; do
  L=$M; [ $v = batch4 ] && L=$N
  env LD_PRELOAD=$L GMEM_TRACE_KEEP=none GMEM_TRACE=0 taskset -c 3 $B/bench/trace_cost 200000 "r$r $route $v trace off" $route | grep '"label"'
done; done; done
echo "t=$((SECONDS - start))"
run() { local label=$1 args=$2; shift 2
  env "$@" python3 $D/rusage_run.py "$label" --nvml -- taskset -c 2-9 python3 $args 2>>$OUT/d11-gmem.log
  echo "== $label" >> $OUT/d11-gmem.log; }
G="PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 GMEM_VERBOSE=1 GMEM_TRACE_KEEP=none"
SC="bench/workloads/torch_train.py --model smallconv --steps 1000"
for r in 1 2; do
  run "r$r smallconv caching" "$SC" X=1
  run "r$r smallconv expandable" "$SC" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  run "r$r smallconv main" "$SC" LD_PRELOAD=$M $G
  run "r$r smallconv batch4" "$SC" LD_PRELOAD=$N $G
  run "r$r smallconv batch4-defaults" "$SC" LD_PRELOAD=$N PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE_KEEP=none
  echo "t=$((SECONDS - start))"
done
GP="bench/workloads/torch_train.py --model gpt --steps 40"
run "r1 gpt expandable" "$GP" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
run "r1 gpt main" "$GP" LD_PRELOAD=$M $G
run "r1 gpt batch4" "$GP" LD_PRELOAD=$N $G
CP="bench/workloads/cupy_work.py --steps 200"
run "r1 cupy pool" "$CP --pool on" X=1
run "r1 cupy main" "$CP --pool off" LD_PRELOAD=$M GMEM_TRACE=0 GMEM_VERBOSE=1
run "r1 cupy batch4" "$CP --pool off" LD_PRELOAD=$N GMEM_TRACE=0 GMEM_VERBOSE=1
echo "elapsed $((SECONDS - start)) s"
} > $OUT/d11.log 2>&1
