#!/usr/bin/env bash
# bench/hook_rounds.py on the fake driver: two short rounds of two builds print both routes with
# every build's row and the rounds as JSON; a build that is not there is named, and nothing runs.
set -u
cd "$(dirname "$0")/../.."
B=${GMEM_BUILD:-build}
skip() { echo "hook_rounds_test: skipped: $*"; exit 77; }
for f in bench/hook_bench lib/libgmem.so tests/fake_cuda/libcuda.so.1; do
  [ -e "$B/$f" ] || skip "$B/$f not built"
done
fail() { echo "hook_rounds_test: FAIL: $*"; echo "$out"; exit 1; }
out=$(timeout 120 python3 bench/hook_rounds.py --build "$B" --rounds 2 --pairs 2000 \
  --lib a="$B/lib/libgmem.so" --lib b="$B/lib/libgmem.so" --json 2>&1) || fail "rc $?"
for want in "2 rounds" "cuMemAlloc_v2 + cuMemFree_v2: trace off mean" \
  "cuMemAllocAsync + cuMemFreeAsync: trace off mean" "  a: on - off mean" "  b: on - off mean"; do
  grep -qF -- "$want" <<<"$out" || fail "no '$want'"
done
[ "$(grep -c ': on - off mean' <<<"$out")" = 4 ] || fail "not 2 builds x 2 routes"
tail -1 <<<"$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["rounds"]) == 2 and all(set(r) == {"off", "a", "b"} for r in d["rounds"]), d
' || fail "the JSON line is not 2 rounds of off, a and b"
out=$(python3 bench/hook_rounds.py --build "$B" --rounds 1 --lib x=/nonexistent/libgmem.so 2>&1) &&
  fail "a missing build ran"
grep -qF "x: no /nonexistent/libgmem.so" <<<"$out" || fail "the missing build is not named"
echo "hook_rounds_test: ok"
