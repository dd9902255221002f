#!/bin/bash
# Session 29, call 8: issue 13 point 3 on the GPT loop with the final library (e04e4e3's
# bundle): PyTorch's caching allocator, expandable segments, no caching + gmem with the trace
# off and with the defaults; 40 steps, cores 2-9, 3 interleaved rounds; NVML peak above idle
# and the md5 of the printed losses. Carried: .device/build.
set -u
D=bench/results/raw/2026-11-26-session28
L=$PWD/.device/build/lib/libgmem.so
export PYTHONUNBUFFERED=1
GPT="bench/workloads/torch_train.py --model gpt --steps 40"
run() { local label=$1; shift
  env "$@" python3 $D/rusage_run.py "$label" --nvml -- taskset -c 2-9 python3 $GPT; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
G="PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE_KEEP=none"
for r in 1 2 3; do
  run "r$r caching" X=1
  run "r$r expandable" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  run "r$r gmem" LD_PRELOAD=$L $G GMEM_TRACE=0
  run "r$r gmem-defaults" LD_PRELOAD=$L $G
done
} > $OUT/e8.log 2>&1
