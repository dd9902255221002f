#!/bin/bash
# Session 27, call 6: the live table's shard count under several recording threads.
# trace_bench (new, b6ee8f7) with 8 live-table shards (the default), 16 and 24 (builds that
# change only writer_config::live_shards' default), --only off / nostacks, 1 / 4 / 8 threads,
# 3 interleaved rounds. Carried: .device/s27.
set -u
N=$PWD/.device/s27/new
declare -A TB=([s8]=$N/trace_bench [s16]=$N/trace_bench-s16 [s24]=$N/trace_bench-s24)
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/c6-device.log
lscpu | grep -E "Model name|^CPU\(s\)" >> $OUT/c6-device.log
{
for r in 1 2 3; do for t in 1 4 8; do for v in s8 s16 s24; do for row in off nostacks; do
  cores=3; [ $t -gt 1 ] && cores=2-9
  echo "== $v round $r threads $t $row: $(taskset -c $cores ${TB[$v]} --runs 3 --threads $t --first-lap 100000 --only $row 2>&1 | tail -1)"
done; done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c6-trace_bench.log 2>&1
