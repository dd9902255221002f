#!/bin/bash
# Session 25, call 6 (H200): perf annotate of libgmem's hottest recording functions in
# torch.empty pairs (defaults, 200,000 pairs): which instructions take the samples.
set -u
W=$PWD/.device/w; P=$PWD/.device/perf
{
which objdump
env LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/t.data -F 20000 -- env -u LD_LIBRARY_PATH \
  LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --pairs 200000 --label annotate 2>&1 | grep kind
LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/t.data -n --no-children --stdio --dsos libgmem.so --sort sym 2>/dev/null | grep "%" | head -25
for s in gmem::trace::live_table::erase gmem::trace::seq_ring::append gmem::trace::capture_python gmem::trace::trace_writer::alloc gmem::trace::trace_writer::free gmem::trace::live_table::insert gmem::trace::cfi_backtrace; do
  echo "==== $s"
  LD_LIBRARY_PATH=$P/lib $P/perf annotate -i $OUT/t.data --stdio --no-source -s "$s" 2>/dev/null | awk '$1+0 >= 1.5' | head -40
done
rm -f $OUT/t.data
} > $OUT/a6.log 2>&1
