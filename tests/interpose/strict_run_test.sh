#!/usr/bin/env bash
# `gmem run --strict` sets GMEM_STRICT=1 for the program: the barrier program (a slow kernel
# writes mapped pinned memory, the program frees an unrelated buffer and reads the memory at
# once) sees the kernel's value with it and a stale one without (fake driver, no GPU).
# Exit 0 pass, 1 fail.
set -u
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
PROBE=$B/tests/interpose/shim_probe
for f in "$GMEM" "$PROBE" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "strict_run_test: missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
out=$("$GMEM" run -q -e GMEM_TRACE=0 --strict -- "$PROBE" runtime strict_free 2>&1)
echo "$out" | grep strict_free
grep -q "strict_free ok=1" <<<"$out" || fail "gmem run --strict: the free did not wait: $out"
out=$("$GMEM" run -q -e GMEM_TRACE=0 -- "$PROBE" runtime strict_free 2>&1)
echo "$out" | grep strict_free
grep -q "strict_free ok=0" <<<"$out" || fail "gmem run without --strict waited (the test cannot fail)"
out=$("$GMEM" run -q -e GMEM_TRACE=0 -e GMEM_STRICT=1 -- "$PROBE" runtime strict_free 2>&1)
grep -q "strict_free ok=1" <<<"$out" || fail "-e GMEM_STRICT=1: the free did not wait"
"$GMEM" run -q -e GMEM_STRICT=maybe -- true 2>/dev/null
[ $? = 2 ] || fail "GMEM_STRICT=maybe: expected a usage error"
echo "strict_run_test: $failures failures"
[ "$failures" -eq 0 ]
