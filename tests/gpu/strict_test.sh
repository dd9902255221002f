#!/usr/bin/env bash
# cudaFree as a barrier on the real driver (GMEM_STRICT): natively every round sees the
# kernel's value; under gmem's default a round reads stale memory (so the test can fail);
# with GMEM_STRICT=1 every round is right again and the pool still serves the allocations.
# cudaMalloc ordering: with GMEM_STRICT=1 the fast kernel issued after the allocation lands
# last. Then the cost: cudaMalloc+cudaFree pairs natively, with gmem, with gmem --strict.
source "$(dirname "$0")/lib.sh"
build_cu strict_barrier strict_barrier.cu
fail=0
"$bin/strict_barrier" free || { echo "FAIL: the barrier program fails without gmem"; fail=1; }
# The control: under gmem's default the program must see the hazard (exit 3, a stale round),
# else the GMEM_STRICT=1 pass below proves nothing. Up to 3 tries: it depends on timing.
rc=0
for _ in 1 2 3; do
  with_shim "$bin/strict_barrier" free >"$bin/strict.log" 2>&1
  rc=$?
  grep '^strict_barrier' "$bin/strict.log"
  [ $rc -eq 3 ] && break
done
[ $rc -eq 3 ] || { echo "FAIL: control: gmem's default saw no stale round in 3 tries (exit $rc)"; fail=1; }
GMEM_STRICT=1 with_shim "$bin/strict_barrier" free >"$bin/strict.log" 2>&1
rc=$?
grep '^strict_barrier' "$bin/strict.log"
[ $rc -eq 0 ] || { echo "FAIL: GMEM_STRICT=1: a round read stale memory (exit $rc)"; fail=1; }
pooled "$bin/strict.log" 5 || fail=1

"$bin/strict_barrier" alloc | sed 's/$/ (native)/'
GMEM_STRICT=1 with_shim "$bin/strict_barrier" alloc >"$bin/strict.log" 2>&1
grep '^strict_barrier' "$bin/strict.log"
grep -q "last=2" "$bin/strict.log" || { echo "FAIL: GMEM_STRICT=1: the allocation did not order the streams"; fail=1; }

echo "cost per cudaMalloc(512)+cudaFree pair:"
"$bin/strict_barrier" bench | sed 's/$/ native/'
with_shim "$bin/strict_barrier" bench 2>/dev/null | sed 's/$/ gmem/'
GMEM_STRICT=1 with_shim "$bin/strict_barrier" bench 2>/dev/null | sed 's/$/ gmem GMEM_STRICT=1/'
exit $fail
