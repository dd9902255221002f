#!/usr/bin/env bash
# Session 22, GPU call N: the segfault in cuEventRecord on a stream another thread destroyed
# (stream_alloc_bench, stream-ordered, 16 threads: 1 run in 6 crashed before the fix). 30 runs
# of the new build, then the base build (main at 361973b) until it crashes, at most 30.
set -u
B=$PWD/.device/build
X=$B/tests/gpu/stream_alloc_bench
args=(--method cudaMallocAsync --label x --threads 16 --seconds 0.5 --random-sizes 256,4M --live 8)
{
for v in new base; do
  lib=$B/lib/libgmem.so; [ $v = base ] && lib=$PWD/.device/base/libgmem.so
  crashes=0; runs=0; sum=0
  for i in $(seq 1 30); do
    out=$(env LD_PRELOAD=$lib GMEM_TRACE=0 $X "${args[@]}" 2>&1); rc=$?
    runs=$((runs + 1))
    if [ $rc != 0 ]; then crashes=$((crashes + 1)); echo "$v run $i rc=$rc"; [ $v = base ] && break; fi
    echo "$out" | grep -q 'mismatches=0' || echo "$v run $i: mismatch or no result: $out"
    echo "$out" | grep -o 'mean *[0-9]* ns/op' | head -1 | sed "s/^/$v run $i /"
  done
  echo "$v: $crashes crashes in $runs runs"
done
} > $OUT/n.log 2>&1
