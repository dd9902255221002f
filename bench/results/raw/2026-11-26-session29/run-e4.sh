#!/bin/bash
# Session 29, call 4: issue 13 point 1's two paths on the GPU host, one thread, trace off:
# hook_bench (the real driver through dlsym; each run measures its floor, a cuCtxGetCurrent
# pair, in the same process), cuMemAlloc/cuMemFree (sync) and cuMemAllocAsync/cuMemFreeAsync on
# a non-blocking stream (async), fixed sizes and the random test; 3 rounds.
# Carried: .device/build (main 9788128) and .device/exp (hook_bench built here).
set -u
L=$PWD/.device/build/lib/libgmem.so
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep "Model name"
for r in 1 2 3; do
  echo "== round $r"
  env LD_PRELOAD=$L GMEM_TRACE=0 GMEM_TRACE_KEEP=none taskset -c 3 .device/exp/hook_bench \
    --api both --threads 1 --tests pair,random --sizes 512,65536,1048576,4194304 2>&1 | grep -v '^{'
done
} > $OUT/e4.log 2>&1
