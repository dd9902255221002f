#!/bin/bash
# Session 28, call 3: the cost of a time stamp on this host (rdtsc_cost.c, built on the build
# machine with gcc -O2), and where trace_bench's stacks-off row spends its time (perf from the
# build machine with its libraries, sampling the CPU clock: the guest has no PMU).
# Carried: .device/perf (perf, its libraries, trace_bench and rdtsc_cost of main).
set -u
P=$PWD/.device/perf
export LD_LIBRARY_PATH=$P/lib
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -i "model name\|MHz"
taskset -c 3 $P/rdtsc_cost
for r in 1 2; do
  taskset -c 3 $P/trace_bench --runs 3 --only off
  taskset -c 3 $P/trace_bench --runs 3 --only nostacks
done
taskset -c 3 $P/perf record -F 20000 -e cpu-clock -o $OUT/d3.data -- $P/trace_bench --runs 3 --only nostacks --pairs 1000000
$P/perf report -i $OUT/d3.data --no-children --stdio --sort sym 2>/dev/null | grep -E "^ +[0-9]" | head -40
for s in $($P/perf report -i $OUT/d3.data --no-children --stdio --sort sym 2>/dev/null | grep -E "^ +[0-9]" | head -6 | awk '{print $3}'); do
  echo "=== annotate $s"
  $P/perf annotate -i $OUT/d3.data --stdio -s "$s" 2>/dev/null | grep -v "^\s*0.00 :" | awk '$1+0 >= 0.8' | head -60
done
} > $OUT/d3.log 2>&1
rm -f $OUT/d3.data
