#!/bin/bash
# Session 24, call 10: the fast-step convnet under gmem's defaults (d190ae4) with perf: how many
# allocations a step makes and what libgmem's recording functions cost per allocation there.
set -u
B=$PWD/.device/prof; P=$PWD/.device/perf
{
env LD_PRELOAD=$B/lib/libgmem.so GMEM_TRACE_KEEP=none GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/c.data -F 10000 -- taskset -c 2-5 python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1 | grep -E "steps_per_s|^gmem: pool device=0 kind=device" | cut -c1-600
echo "-- libgmem samples by thread name and function"
LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/c.data -n --no-children --stdio --dsos libgmem.so --sort comm,sym 2>/dev/null | grep "%" | head -40
echo "-- samples by thread name"
LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/c.data -n --no-children --stdio --sort comm 2>/dev/null | grep "%" | head
rm -f $OUT/c.data
} > $OUT/p10.log 2>&1
