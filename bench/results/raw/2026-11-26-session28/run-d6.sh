#!/bin/bash
# Session 28, call 6: the arena's fence batch (pool_options::fence_batch 4, the new default)
# against main's rule (a fence as soon as the pending blocks could cover one request), on the
# GPU: steps/s, NVML peak above idle, last loss, and gmem's barrier count (GMEM_VERBOSE=1).
# Interleaved rounds: the small convnet (1000 steps: 3 rounds), the GPT loop (40 steps: 2
# rounds), CuPy without its pool (200 steps: 2 rounds), each beside PyTorch's caching allocator,
# expandable segments / CuPy's own pool. gmem runs with the trace off (issue 13 point 3).
# Carried: .device/build (main 98e7d89's bundle; lib/libgmem-new.so = the fence-batch build).
set -u
D=bench/results/raw/2026-11-26-session28
B=$PWD/.device/build/lib
export PYTHONUNBUFFERED=1
start=$SECONDS
run() { # label, workload args, then environment
  local label=$1 args=$2; shift 2
  env "$@" python3 $D/rusage_run.py "$label" --nvml -- taskset -c 2-9 python3 $args 2>>$OUT/d6-gmem.log
  echo "== $label" >> $OUT/d6-gmem.log
}
G="PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 GMEM_VERBOSE=1"
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SC="bench/workloads/torch_train.py --model smallconv --steps 1000"
for r in 1 2 3; do
  run "r$r smallconv caching" "$SC" X=1
  run "r$r smallconv expandable" "$SC" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  run "r$r smallconv main" "$SC" LD_PRELOAD=$B/libgmem.so $G
  run "r$r smallconv batch4" "$SC" LD_PRELOAD=$B/libgmem-new.so $G
  echo "t=$((SECONDS - start))"
done
GP="bench/workloads/torch_train.py --model gpt --steps 40"
for r in 1 2; do
  run "r$r gpt expandable" "$GP" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  run "r$r gpt main" "$GP" LD_PRELOAD=$B/libgmem.so $G
  run "r$r gpt batch4" "$GP" LD_PRELOAD=$B/libgmem-new.so $G
  echo "t=$((SECONDS - start))"
done
CP="bench/workloads/cupy_work.py --steps 200"
for r in 1 2; do
  run "r$r cupy pool" "$CP --pool on" X=1
  run "r$r cupy main" "$CP --pool off" LD_PRELOAD=$B/libgmem.so GMEM_TRACE=0 GMEM_VERBOSE=1
  run "r$r cupy batch4" "$CP --pool off" LD_PRELOAD=$B/libgmem-new.so GMEM_TRACE=0 GMEM_VERBOSE=1
  echo "t=$((SECONDS - start))"
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/d6.log 2>&1
