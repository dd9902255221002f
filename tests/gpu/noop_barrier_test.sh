#!/usr/bin/env bash
# The GPU's reuse-safety tests can fail: with the test build of the shim whose context barrier
# orders nothing (the make target $(BUILD)/tests/gpu/noop_barrier/libgmem.so, built with
# GMEM_TEST_NOOP_BARRIER) in place of libgmem.so,
# - a block freed while the old owner's kernel runs on a non-blocking stream and handed to a
#   kernel on another stream is corrupted, for every new stream kind that does not order
#   itself after the old one, and the same runs stay clean with the fan-out
#   (GMEM_CONTEXT_BARRIER=0), which the test build leaves as it is;
# - tests/gpu/reuse_hazard_test.sh and tests/gpu/stream_alloc_test.sh fail;
# - with two GPUs, tests/gpu/ddp_test.sh is run too and its verdict printed.
source "$(dirname "$0")/lib.sh"
mutant=$bin/noop_barrier/libgmem.so
[ -f "$mutant" ] || { echo "no $mutant: run make test-gpu (it builds the test shim)"; exit 1; }
build_cu reuse_hazard reuse_hazard.cu

# A build layout whose lib/libgmem.so is the test build: the real one's libraries beside it,
# its tool and GPU test programs.
layout=$(mktemp -d "${TMPDIR:-/tmp}/gmem-noop.XXXXXX")
trap 'rm -rf "$layout"' EXIT
cp -a "$build/lib" "$build/bin" "$layout/"
cp "$mutant" "$layout/lib/libgmem.so"
mkdir -p "$layout/tests"
cp -a "$bin" "$layout/tests/gpu"
for d in api tools exporter; do
  [ -d "$build/tests/$d" ] && cp -a "$build/tests/$d" "$layout/tests/"
done
noop=$layout/lib/libgmem.so

fail=0
# hazard OLD NEW WAY: the exit of the barrier run with the test shim (3 = corrupted).
hazard() {
  env GMEM_CONTEXT_BARRIER="$3" LD_PRELOAD="$noop" GMEM_VERBOSE=1 \
    "$bin/reuse_hazard" barrier "$1" "$2" >"$layout/hazard.log" 2>&1
  rc=$?
  echo "$(grep '^reuse_hazard' "$layout/hazard.log") context_barrier=$3 (test shim, exit $rc)"
  grep -q "reused=1" "$layout/hazard.log" || { echo "FAIL: $1->$2: the block was not reused"; fail=1; }
}
for old in nonblocking blocking; do
  for new in nonblocking later; do
    hazard $old $new 1
    [ $rc -eq 3 ] || { echo "FAIL: $old->$new not corrupted with a no-op context barrier"; fail=1; }
    hazard $old $new 0
    [ $rc -eq 0 ] || { echo "FAIL: $old->$new corrupted with the fan-out (exit $rc)"; fail=1; }
  done
done

# must_fail SCRIPT: the test fails with the test shim.
must_fail() {
  GMEM_BUILD=$layout "$here/$1" >"$layout/$1.log" 2>&1
  local rc=$?
  grep -E '^FAIL' "$layout/$1.log" | head -5
  if [ $rc -eq 0 ] || [ $rc -eq 77 ]; then
    echo "FAIL: $1 passed with a no-op context barrier (exit $rc)"
    fail=1
  else
    echo "ok: $1 fails with a no-op context barrier (exit $rc)"
  fi
}
must_fail reuse_hazard_test.sh
must_fail stream_alloc_test.sh

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${gpus:-0}" -ge 2 ]; then
  GMEM_BUILD=$layout "$here/ddp_test.sh" >"$layout/ddp.log" 2>&1
  echo "ddp_test.sh with a no-op context barrier: exit $? ($(grep -cE '^FAIL' "$layout/ddp.log") FAIL lines)"
  grep -E '^FAIL|^ok' "$layout/ddp.log" | head -8
fi
exit $fail
