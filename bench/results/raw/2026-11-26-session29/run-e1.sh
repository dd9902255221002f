#!/bin/bash
# Session 29, call 1: which streams the fast-step convnet's device work runs on (torch.profiler),
# under PyTorch's caching allocator and under no caching + gmem (trace off), and gmem's barrier
# counters for the same 25 steps. Carried: .device/build (main at 9788128).
set -u
D=bench/results/raw/2026-11-26-session29
L=$PWD/.device/build/lib/libgmem.so
export PYTHONUNBUFFERED=1
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== PyTorch caching allocator"
python3 $D/stream_usage.py --steps 20 --out $OUT/e1-caching.json
echo "== no caching + gmem, trace off"
env LD_PRELOAD=$L GMEM_TRACE=0 GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  python3 $D/stream_usage.py --steps 20 --out $OUT/e1-gmem.json 2>&1 | grep -v "^gmem: \(vmm\|passthrough\|substitutions\|stacks\|host_time\|events\)"
gzip $OUT/e1-*.json   # (not kept in the repository: the log has the counts)
} > $OUT/e1.log 2>&1
