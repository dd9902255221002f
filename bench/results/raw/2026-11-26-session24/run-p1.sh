#!/bin/bash
# Session 24, call 1: where the recording's time goes on the H200 host (perf, cpu-clock samples).
set -u
P=$PWD/.device/perf; B=$PWD/.device/prof
export LD_LIBRARY_PATH_PERF=$P/lib
perf() { LD_LIBRARY_PATH=$P/lib $P/perf "$@"; }
cd $OUT
{
id; cat /proc/sys/kernel/perf_event_paranoid; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
perf stat -e cycles,instructions,cache-misses,L1-dcache-load-misses,dTLB-load-misses -- taskset -c 3 $B/bench/trace_bench --only nostacks --runs 1 2>&1 | tail -20
echo "== trace_bench nostacks perf record"
perf record -o tb.data -F 4000 -- taskset -c 3 $B/bench/trace_bench --only nostacks --runs 1 --pairs 1000000 2>&1 | tail -3
perf report -i tb.data --no-children --stdio 2>/dev/null | grep "%" | head -30
for s in gmem::trace::seq_ring::append gmem::trace::live_table::insert gmem::trace::live_table::erase; do
  echo "== annotate $s"; perf annotate -i tb.data --stdio -s $s 2>/dev/null | grep -E "^\s+[0-9]+\.[0-9]+ :" | sort -rn | head -12
done
for cfg in "GMEM_TRACE=1" "GMEM_TRACE=0"; do
  echo "== torch_alloc_cost $cfg perf record"
  env LD_PRELOAD=$B/lib/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
    LD_LIBRARY_PATH=$P/lib $P/perf record -o torch-$cfg.data -F 4000 -g -- taskset -c 3 python3 $OLDPWD/bench/workloads/torch_alloc_cost.py --pairs 200000 --label "$cfg" 2>&1 | tail -2
  perf report -i torch-$cfg.data --no-children --stdio --sort dso 2>/dev/null | grep "%" | grep -v "^ *|" | head -15
  perf report -i torch-$cfg.data --no-children --stdio -g none --sort dso,sym 2>/dev/null | grep "%" | head -60
done
perf report -i torch-GMEM_TRACE=1.data --children --stdio -g none --sort sym 2>/dev/null | grep "%" | head -50
} > $OUT/p1.log 2>&1
rm -f $OUT/*.data
