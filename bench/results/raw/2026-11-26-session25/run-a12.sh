#!/bin/bash
# Session 25, call 13 (H200): 2b02da5 (.device/w3) against the review mend (no prefetch at the end of an append;
# .device/w2): perf sample counts of libgmem's functions in
# torch.empty pairs (defaults, 200,000 pairs, 10 kHz), 3 interleaved rounds; trace_bench (both
# built from the mended bench source) with 0 and 1 MiB written between pairs, stacks off and
# shallow (libdw found through LD_LIBRARY_PATH).
set -u
P=$PWD/.device/perf
declare -A LIB=([mid]=$PWD/.device/w3/lib [new]=$PWD/.device/w2/lib)
declare -A TB=([mid]=$PWD/.device/tb/tb-mid [new]=$PWD/.device/tb/tb-mend)
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3; do for v in mid new; do
  env LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/t.data -F 10000 -- env -u LD_LIBRARY_PATH \
    LD_PRELOAD=${LIB[$v]}/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --pairs 200000 --label "$v r$r" 2>&1 | grep kind
  echo "-- $v round $r libgmem samples"
  LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/t.data -n --no-children --stdio --dsos libgmem.so --sort sym 2>/dev/null | grep "%" | head -30
  rm -f $OUT/t.data
done; done
for r in 1 2; do for between in 0 1M; do for v in mid new; do for row in nostacks shallow; do
  echo -n "$v r$r between=$between "; LD_LIBRARY_PATH=${LIB[$v]} ${TB[$v]} --runs 2 --only $row --between $between | tail -1
done; done; done; done
} > $OUT/a12.log 2>&1
