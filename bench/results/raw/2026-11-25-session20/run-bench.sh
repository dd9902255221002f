#!/usr/bin/env bash
# GPU call 2: the tracing issue's measurements (bench/trace_cost_gpu.sh, REPS=2).
set -u
export PYTHONUNBUFFERED=1
start=$SECONDS
BUILD=$PWD/.device/build REPS=${REPS:-2} timeout ${BENCH_S:-540} bash bench/trace_cost_gpu.sh $OUT/tc > $OUT/trace_cost_gpu.log 2>&1
echo "rc=$? total $((SECONDS - start)) s" >> $OUT/trace_cost_gpu.log
tar czf $OUT/tc.tgz -C $OUT tc 2>/dev/null && rm -rf $OUT/tc
