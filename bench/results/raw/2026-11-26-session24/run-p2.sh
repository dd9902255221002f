#!/bin/bash
# Session 24, call 2: perf of torch.empty pairs under gmem, trace on against off.
set -u
P=$PWD/.device/perf; B=$PWD/.device/prof; R=$PWD
perf() { LD_LIBRARY_PATH=$P/lib $P/perf "$@"; }
cd $OUT
{
for cfg in "GMEM_TRACE=1" "GMEM_TRACE=0" "GMEM_TRACE=1"; do
  echo "== torch_alloc_cost $cfg perf record"
  env LD_PRELOAD=$B/lib/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
    LD_LIBRARY_PATH=$P/lib $P/perf record -o t.data -F 4000 -g -- taskset -c 3 python3 $R/bench/workloads/torch_alloc_cost.py --pairs 300000 --label "$cfg" 2>&1 | grep -v "^\[ perf"
  perf report -i t.data --no-children --stdio -g none --sort dso 2>/dev/null | grep "%" | head -12
  echo "-- libgmem symbols (self)"
  perf report -i t.data --no-children --stdio -g none --dsos libgmem.so --sort sym 2>/dev/null | grep "%" | head -40
  echo "-- kernel symbols (self)"
  perf report -i t.data --no-children --stdio -g none --dsos '[kernel.kallsyms]' --sort sym 2>/dev/null | grep "%" | head -12
  echo "-- children, libgmem entry points"
  perf report -i t.data --children --stdio -g none --sort sym 2>/dev/null | grep "%" | grep -E "gmem::|cuMem|hook" | head -30
  echo "-- callers of page faults"
  perf report -i t.data --no-children --stdio -G --dsos '[kernel.kallsyms]' --sort sym --symbol-filter=clear_page 2>/dev/null | grep -E "[0-9]%|--" | head -30
  rm -f t.data
done
} > $OUT/p2.log 2>&1
