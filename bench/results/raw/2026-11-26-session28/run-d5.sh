#!/bin/bash
# Session 28, call 5 (asked for an H200): the time stamp's cost and trace_bench's off / stamps /
# nostacks rows, as in call 4. Carried: .device/build (as call 4).
set -u
B=$PWD/.device/build
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -i "model name"
taskset -c 3 $B/bench/rdtsc_cost
for r in 1 2 3; do
  for row in off stamps nostacks; do taskset -c 3 $B/bench/trace_bench --runs 3 --only $row | tail -1; done
done
} > $OUT/d5.log 2>&1
