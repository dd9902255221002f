#!/bin/bash
# Session 24, call 11: the fast-step convnet (d190ae4), trace on against off, each under perf:
# samples by thread and library, to find what the ~4% tracing costs there is.
set -u
B=$PWD/.device/prof; P=$PWD/.device/perf
{
for r in 1 2; do for cfg in GMEM_TRACE=1 GMEM_TRACE=0; do
echo "== round $r $cfg"
env LD_PRELOAD=$B/lib/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
  LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/c.data -F 10000 -- taskset -c 2-5 python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1 | grep -o '"steps_per_s": [0-9.]*'
LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/c.data -n --no-children --stdio --sort comm,dso 2>/dev/null | grep "%" | head -24
if [ $cfg = GMEM_TRACE=1 ]; then
  echo "-- kernel symbols"
  LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/c.data -n --no-children --stdio --dsos '[kernel.kallsyms]' --sort sym 2>/dev/null | grep "%" | head -12
fi
rm -f $OUT/c.data
done; done
} > $OUT/p11.log 2>&1
