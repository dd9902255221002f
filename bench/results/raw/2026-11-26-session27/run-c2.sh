#!/bin/bash
# Session 27, call 2: as call 1 (same builds; new rebuilt with the lane TLS declared constinit,
# which drops a TLS-init check per event), more rounds of the single-thread rows and the new
# trace_bench --threads: N threads recording at once into one trace, each its own addresses.
#  1. trace_bench --only off / nostacks, 1 thread (core 3), 4 interleaved rounds of --runs 3.
#  2. trace_bench --only off / nostacks, 4 and 8 threads (cores 2-9), 2 rounds.
#  3. trace_cost 200000 pairs, driver route, GMEM_STACK_DEPTH=0 / GMEM_TRACE=0 / defaults, 3 rounds.
set -u
N=$PWD/.device/s27
declare -A LIB=([base]=$N/base/lib/libgmem.so [new]=$N/new/lib/libgmem.so)
declare -A TB=([base]=$N/base/trace_bench [new]=$N/new/trace_bench)
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/c2-device.log
lscpu | grep -E "Model name|^CPU\(s\)" >> $OUT/c2-device.log
{
for r in 1 2 3 4; do for v in base new; do for row in off nostacks; do
  echo "== $v round $r threads 1 $row: $(taskset -c 3 ${TB[$v]} --runs 3 --only $row 2>&1 | tail -1)"
done; done; done
for t in 4 8; do for r in 1 2; do for v in base new; do for row in off nostacks; do
  echo "== $v round $r threads $t $row: $(taskset -c 2-9 ${TB[$v]} --runs 3 --threads $t --first-lap 100000 --only $row 2>&1 | tail -1)"
done; done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c2-trace_bench.log 2>&1
{
for r in 1 2 3; do for v in base new; do for cfg in GMEM_STACK_DEPTH=0 GMEM_TRACE=0 GMEM_TRACE=1; do
  env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none $cfg taskset -c 3 $N/trace_cost 200000 "$v r$r $cfg" driver 2>&1 | grep '"label"' | grep -v "fenced\|did not"
done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c2-trace_cost.log 2>&1
