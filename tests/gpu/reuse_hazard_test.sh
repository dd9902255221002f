#!/usr/bin/env bash
# The reuse hazard on the real driver: never corrupted with gmem (stream-less and stream-ordered
# frees, several runs), corrupted with GMEM_REUSE_SAFETY=0 (so the test can fail).
source "$(dirname "$0")/lib.sh"
build_cu reuse_hazard reuse_hazard.cu
fail=0
for mode in sync async; do
  "$bin/reuse_hazard" $mode || { echo "FAIL: $mode hazard without the shim"; fail=1; }
  for i in 1 2 3; do
    with_shim "$bin/reuse_hazard" $mode >"$bin/hazard.log" 2>&1
    rc=$?
    grep reuse_hazard "$bin/hazard.log"
    [ $rc -eq 0 ] || { echo "FAIL: $mode hazard with reuse safety (exit $rc)"; fail=1; }
  done
  pooled "$bin/hazard.log" 2 || fail=1
  GMEM_REUSE_SAFETY=0 with_shim "$bin/reuse_hazard" $mode >"$bin/hazard.log" 2>&1
  rc=$?
  grep reuse_hazard "$bin/hazard.log"
  [ $rc -eq 3 ] || { echo "FAIL: $mode hazard did not corrupt with GMEM_REUSE_SAFETY=0 (exit $rc)"; fail=1; }
done
exit $fail
