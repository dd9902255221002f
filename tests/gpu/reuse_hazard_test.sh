#!/usr/bin/env bash
# The reuse hazard on the real driver: never corrupted with gmem (stream-less and stream-ordered
# frees, several runs), corrupted with GMEM_REUSE_SAFETY=0 (so the test can fail). Then the
# pool's device-side barriers (GMEM_BARRIERS=1, the default): the old owner's slow kernel on
# every kind of stream, the same address handed back without a host synchronization, the new
# owner on every kind of stream (one created after the barrier included); the pool's barriers
# and fences counts are printed for each run, and a run that made no barrier fails. Each barrier
# run is made both ways: one context barrier, and the fan-out over the streams.
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

# pool_counter LOG NAME: NAME=value of the device pool in the GMEM_VERBOSE report.
pool_counter() {
  sed -n "s/^gmem: pool device=[0-9]* kind=device .* $2=\([0-9]*\).*/\1/p" "$1" | head -1
}

# barrier_run OLD NEW [VAR=value...]: prints the program's line and the pool's counters.
barrier_run() {
  local old=$1 new=$2
  shift 2
  env "$@" LD_PRELOAD="$shim" GMEM_VERBOSE=1 "$bin/reuse_hazard" barrier "$old" "$new" \
    >"$bin/barrier.log" 2>&1
  rc=$?
  barriers=$(pool_counter "$bin/barrier.log" barriers)
  fences=$(pool_counter "$bin/barrier.log" fences)
  context=$(sed -n 's/^gmem: barriers made=[0-9]* context=\([0-9]*\) .*/\1/p' "$bin/barrier.log")
  echo "$(grep '^reuse_hazard' "$bin/barrier.log") barriers=${barriers:-?} context=${context:-?} fences=${fences:-?} ${*}"
}

# Both ways of making a barrier: the context barrier (drivers of CUDA 12.5 and later, the
# default) and the fan-out over the streams (GMEM_CONTEXT_BARRIER=0, as on older drivers).
"$bin/reuse_hazard" barrier nonblocking later || { echo "FAIL: barrier hazard without the shim"; fail=1; }
for way in 1 0; do
  for old in legacy blocking nonblocking ptds; do
    for new in legacy blocking nonblocking later ptds; do
      barrier_run $old $new GMEM_CONTEXT_BARRIER=$way
      [ $rc -eq 0 ] || { echo "FAIL: barrier $old->$new corrupted or failed (exit $rc)"; fail=1; }
      grep -q "reused=1" "$bin/barrier.log" || { echo "FAIL: barrier $old->$new: the block was not reused"; fail=1; }
      [ "${barriers:-0}" -ge 1 ] || { echo "FAIL: barrier $old->$new: the pool made no barrier"; fail=1; }
      if [ $way = 1 ]; then
        [ "${context:-0}" -ge 1 ] || { echo "FAIL: barrier $old->$new: no context barrier"; fail=1; }
      else
        [ "${context:-1}" -eq 0 ] || { echo "FAIL: barrier $old->$new: GMEM_CONTEXT_BARRIER=0 made a context barrier"; fail=1; }
      fi
    done
  done
done
barrier_run nonblocking nonblocking GMEM_REUSE_SAFETY=0
[ $rc -eq 3 ] || { echo "FAIL: barrier hazard did not corrupt with GMEM_REUSE_SAFETY=0 (exit $rc)"; fail=1; }
barrier_run nonblocking later GMEM_BARRIERS=0
[ $rc -eq 0 ] || { echo "FAIL: barrier hazard with GMEM_BARRIERS=0 (exit $rc)"; fail=1; }
[ "${barriers:-1}" -eq 0 ] || { echo "FAIL: GMEM_BARRIERS=0 still made barriers"; fail=1; }
exit $fail
