#!/usr/bin/env bash
# A graph capture open on one thread while another frees and allocates (tests/gpu/capture_fence.cu):
# natively and under gmem the capture ends, the replayed graph is right and no block is reused
# under a running kernel. Under gmem the fences made while the capture was open are not context
# barriers (they would invalidate it) and those made after it are: GMEM_VERBOSE's
# "barriers made=M context=C" shows C >= 1, and "captures open=0 tracked=1".
source "$(dirname "$0")/lib.sh"
build_cu capture_fence capture_fence.cu
fail=0
"$bin/capture_fence" sync-probe
"$bin/capture_fence" || { echo "FAIL: capture_fence without the shim"; fail=1; }
for i in 1 2; do
  with_shim "$bin/capture_fence" >"$bin/capture_fence.log" 2>&1
  rc=$?
  grep -E '^capture_fence|^gmem: (barriers|captures)' "$bin/capture_fence.log"
  [ $rc -eq 0 ] || { echo "FAIL: capture_fence under gmem (exit $rc)"; fail=1; }
  pooled "$bin/capture_fence.log" 100 || fail=1
  context=$(sed -n 's/^gmem: barriers made=[0-9]* context=\([0-9]*\) .*/\1/p' "$bin/capture_fence.log")
  [ "${context:-0}" -ge 1 ] || { echo "FAIL: no context barrier after the capture ended"; fail=1; }
  grep -q '^gmem: captures open=0 tracked=1' "$bin/capture_fence.log" ||
    { echo "FAIL: the capture count did not come back to 0"; fail=1; }
done
exit $fail
