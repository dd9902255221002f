#!/bin/bash
# Session 24, call 9: base (main 1246937) against 8c883ae (the stack memo): perf sample counts
# of libgmem's functions in torch.empty pairs (10 kHz, 200,000 pairs, defaults), 2 rounds.
set -u
B=$PWD/.device/prof; P=$PWD/.device/perf
declare -A LIB=([base]=$B/base/libgmem.so [new]=$B/lib/libgmem.so)
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== perf sample counts (-F 10000), torch_alloc_cost 200000 pairs, defaults"
for r in 1 2; do for v in base new; do
  env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/t.data -F 10000 -- taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --pairs 200000 --label "$v perf" 2>&1 | grep kind
  echo "-- $v libgmem samples"
  LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/t.data -n --no-children --stdio --dsos libgmem.so --sort sym 2>/dev/null | grep "%" | head -40
  rm -f $OUT/t.data
done; done
} > $OUT/p9.log 2>&1
