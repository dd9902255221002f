#!/bin/bash
# Session 26, call 2: (1) what sets trace_cost's p99 with the trace off: the driver route with
# the defaults (a fence is a device-side barrier: one event record) against GMEM_BARRIERS=0 (a
# fence is cuCtxSynchronize), 2 rounds, and gmem's counters once; (2) issue 12 point 1 with
# stacks: perf sample counts of libgmem's functions in torch.empty pairs (defaults, 200,000
# pairs, 10 kHz), base (b0c022d, .device/w) against main (.device/w4), 3 interleaved rounds;
# (3) make test-gpu with main's build. Parts by argument (the carried files of one call are
# limited): `run-b1.sh 1 3` carried .device/build; `run-b1.sh 2` carried .device/w,
# .device/w4 (main's lib folder alone) and .device/perf.
set -u
P=$PWD/.device/perf
declare -A LIB=([base]=$PWD/.device/w/lib [new]=$PWD/.device/w4/lib)
T=$PWD/.device/build/bench/trace_cost
start=$SECONDS
parts=" $* "
if [[ $parts == *" 1 "* ]]; then
LIB[new]=$PWD/.device/build/lib
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
env LD_PRELOAD=${LIB[new]}/libgmem.so GMEM_TRACE_KEEP=none GMEM_TRACE=0 GMEM_VERBOSE=1 taskset -c 3 \
  $T 200000 "new verbose" driver 2>&1 | grep -E "kind|gmem: (pool |barriers|host_time)" | cut -c1-400
for r in 1 2; do for b in 1 0; do for route in driver runtime; do
  env LD_PRELOAD=${LIB[new]}/libgmem.so GMEM_TRACE_KEEP=none GMEM_TRACE=0 GMEM_BARRIERS=$b taskset -c 3 \
    $T 200000 "new r$r barriers=$b" $route
done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/b1-trace_cost.log 2>&1
fi
if [[ $parts == *" 2 "* ]]; then
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3; do for v in base new; do
  env LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/t.data -F 10000 -- env -u LD_LIBRARY_PATH \
    LD_PRELOAD=${LIB[$v]}/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --pairs 200000 --label "$v r$r" 2>&1 | grep kind
  echo "-- $v round $r libgmem samples"
  LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/t.data -n --no-children --stdio --dsos libgmem.so --sort sym 2>/dev/null | grep "%" | head -40
  rm -f $OUT/t.data
done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/b1-perf.log 2>&1
fi
if [[ $parts == *" 3 "* ]]; then
OUT=$OUT/session bash scripts/gpu-session.sh tests > $OUT/b1-test-gpu-session.log 2>&1
cp $OUT/session/test-gpu.log $OUT/test-gpu.log 2>/dev/null
rm -rf $OUT/session
echo "elapsed $((SECONDS - start)) s" >> $OUT/b1-test-gpu-session.log
fi
