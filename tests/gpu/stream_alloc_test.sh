#!/usr/bin/env bash
# Many threads, each on its own non-blocking stream with kernels in flight, allocating and
# freeing through gmem (stream-ordered and cudaFree) while a check kernel verifies every block
# still holds what its own fill wrote: a block handed out early to another thread's stream
# shows as mismatches (exit 3), also with check kernels that read 200 us late. Also prints the
# cost per op next to the launch floor.
source "$(dirname "$0")/lib.sh"
src=$root/bench/stream_alloc_bench.cu
out=$bin/stream_alloc_bench
if [ ! -x "$out" ] || [ "$src" -nt "$out" ] || [ "$root/bench/alloc_harness.h" -nt "$out" ]; then
  [ -x "$NVCC" ] || { echo "skipped: no nvcc"; exit 77; }
  "$NVCC" -O2 -std=c++17 -arch=sm_90 -I"$root" "$src" -o "$out" || { echo "nvcc failed"; exit 1; }
fi
fail=0
"$out" --method floor --threads 1,4,16 --seconds 0.3 --label floor || fail=1
for m in cudaMallocAsync cudaMalloc; do
  with_shim "$out" --method $m --threads 1,4,16 --seconds 0.5 --label "gmem-$m" >"$bin/stream.log" 2>&1
  rc=$?
  grep -E '^gmem-' "$bin/stream.log"
  [ $rc -eq 0 ] || { echo "FAIL: gmem $m with kernels in flight (exit $rc: 3 = a check kernel saw another op's data)"; fail=1; }
  pooled "$bin/stream.log" 1000 || fail=1
done
# The same with every check kernel reading 200 us late: a block handed to another thread's
# stream before the old owner's check ran is seen (the hazard's window is the delay).
for m in cudaMallocAsync cudaMalloc; do
  with_shim "$out" --method $m --threads 16 --seconds 0.5 --check-delay-us 200 \
    --label "gmem-$m-slow-check" >"$bin/stream.log" 2>&1
  rc=$?
  grep -E '^gmem-.*(mismatches|stream)' "$bin/stream.log"
  [ $rc -eq 0 ] || { echo "FAIL: gmem $m with slow checks in flight (exit $rc: 3 = a check kernel saw another op's data)"; fail=1; }
  pooled "$bin/stream.log" 1000 || fail=1
done
exit $fail
