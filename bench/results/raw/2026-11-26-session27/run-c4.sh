#!/bin/bash
# Session 27, call 4: (1) issue 12 point 1 with stacks: perf sample counts of libgmem's
# functions in torch.empty pairs (torch_alloc_cost.py, defaults, 200,000 pairs, 10 kHz), base
# against new, 2 interleaved rounds (as session 26's run-b1.sh part 2); (2) where the fast-step
# convnet's time goes with the defaults (new): perf by shared object and libgmem's top
# functions; (3) the convnet's steps/s, new, trace off then defaults, 3 more rounds.
# Carried: .device/s27, .device/perf.
set -u
P=$PWD/.device/perf
N=$PWD/.device/s27
declare -A LIB=([base]=$N/base/lib/libgmem.so [new]=$N/new/lib/libgmem.so)
start=$SECONDS
export PYTHONUNBUFFERED=1
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do for v in base new; do
  env LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/t.data -F 10000 -- env -u LD_LIBRARY_PATH \
    LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --pairs 200000 --label "$v r$r" 2>&1 | grep kind
  echo "-- $v round $r libgmem samples"
  LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/t.data -n --no-children --stdio --dsos libgmem.so --sort sym 2>/dev/null | grep "%" | head -40
  rm -f $OUT/t.data
done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c4-perf-torch.log 2>&1
{
env LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/c.data -F 5000 -- env -u LD_LIBRARY_PATH \
  LD_PRELOAD=${LIB[new]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  taskset -c 2-5 python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1 | grep -o '"steps_per_s": [0-9.]*' | head -1
echo "-- by shared object"
LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/c.data -n --no-children --stdio --sort dso 2>/dev/null | grep "%" | head -20
echo "-- libgmem functions"
LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/c.data -n --no-children --stdio --dsos libgmem.so --sort sym 2>/dev/null | grep "%" | head -30
rm -f $OUT/c.data
for r in 1 2 3; do for cfg in GMEM_TRACE=0 GMEM_TRACE=1; do
  out=$(env LD_PRELOAD=${LIB[new]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
    taskset -c 2-5 python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1)
  echo "round $r new $cfg: $(echo "$out" | grep -o '"steps_per_s": [0-9.]*' | head -1)"
done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c4-convnet.log 2>&1
