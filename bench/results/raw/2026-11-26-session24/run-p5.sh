#!/bin/bash
# Session 24, call 5: base (main 1246937) against new: trace_bench with libdw found
# (LD_LIBRARY_PATH), perf sample counts of libgmem's functions in torch.empty pairs, and
# torch_alloc_cost in 6 interleaved rounds.
set -u
B=$PWD/.device/prof; P=$PWD/.device/perf
declare -A LIB=([base]=$B/base/libgmem.so [new]=$B/lib/libgmem.so)
{
echo "== trace_bench, 2 rounds (LD_LIBRARY_PATH=$B/lib)"
for r in 1 2; do for v in base new; do
  echo "-- $v"; LD_LIBRARY_PATH=$B/lib taskset -c 3 $B/bench/trace_bench-$v --runs 2 | tail -6
done; done
echo "== perf sample counts (-F 10000), torch_alloc_cost 200000 pairs, defaults"
for r in 1 2; do for v in base new; do
  env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/t.data -F 10000 -- taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --pairs 200000 --label "$v perf" 2>&1 | grep kind
  echo "-- $v libgmem samples"
  LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/t.data -n --no-children --stdio --dsos libgmem.so --sort sym 2>/dev/null | grep "%" | head -14
  rm -f $OUT/t.data
done; done
echo "== torch_alloc_cost pinned (taskset -c 3), 4 rounds, 60000 pairs"
for r in 1 2 3 4; do
  for v in base new; do
    for cfg in "GMEM_TRACE=0" "GMEM_TRACE=1"; do
      env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --pairs 60000 --label "$v $cfg" 2>&1 | tail -1
    done
  done
done
} > $OUT/p5.log 2>&1
