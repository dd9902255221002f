#!/bin/bash
# Session 29, call 2: what the small convnet would gain from barriers that know which
# non-blocking streams have work (launch interception). Call 1 found all of its device work on
# the legacy stream, so for this program the hub record alone is a complete barrier:
# .device/exp is main with legacy-only-experiment.patch (GMEM_EXPERIMENT_LEGACY_ONLY=1; unsafe
# for programs that use non-blocking streams, never landed). 4 interleaved rounds, 1000 steps,
# cores 2-9: PyTorch's caching allocator; no caching + gmem main, trace off; the same with the
# experiment; the experiment with the defaults (trace on). Losses are checked by md5 in the log.
# Carried: .device/build (main 9788128) and .device/exp.
set -u
D=bench/results/raw/2026-11-26-session28
M=$PWD/.device/build/lib/libgmem.so
X=$PWD/.device/exp/libgmem.so
export PYTHONUNBUFFERED=1
start=$SECONDS
SC="bench/workloads/torch_train.py --model smallconv --steps 1000"
run() { local label=$1; shift
  env "$@" python3 $D/rusage_run.py "$label" -- taskset -c 2-9 python3 $SC; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
G="PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE_KEEP=none"
for r in 1 2 3 4; do
  run "r$r caching" X=1
  run "r$r main" LD_PRELOAD=$M $G GMEM_TRACE=0
  run "r$r legacy-only" LD_PRELOAD=$X $G GMEM_TRACE=0 GMEM_EXPERIMENT_LEGACY_ONLY=1
  run "r$r legacy-only-defaults" LD_PRELOAD=$X $G GMEM_EXPERIMENT_LEGACY_ONLY=1
  echo "t=$((SECONDS - start))"
done
env LD_PRELOAD=$X $G GMEM_TRACE=0 GMEM_EXPERIMENT_LEGACY_ONLY=1 GMEM_VERBOSE=1 \
  python3 $SC 2>&1 | grep -E "steps_per_s|gmem: (barriers|pool device=0 kind=device)" | cut -c1-400
} > $OUT/e2.log 2>&1
