#!/usr/bin/env bash
# A traced program on a /dev/shm that really fills up: a 1 MiB tmpfs mounted over /dev/shm in a
# private mount namespace (root and unshare needed; skipped otherwise). The trace must stop
# growing with one warning, the program must run to its end (no SIGBUS, no failed allocation)
# and the trace must stay readable, counting what it could not hold.
set -u
B=$(realpath "${GMEM_BUILD:-build}")
skip() { echo "full_shm_test: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to mount a small tmpfs"
command -v unshare >/dev/null && unshare -m true 2>/dev/null || skip "cannot make a mount namespace"
for f in lib/libgmem.so tests/fake_cuda/libcuda.so.1 tests/trace_e2e_program bin/gmem; do
  [ -e "$B/$f" ] || skip "$B/$f not built"
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
timeout 120 unshare -m bash -c '
  B=$1 out=$2
  mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 90
  LD_PRELOAD=$B/lib/libgmem.so LD_LIBRARY_PATH=$B/tests/fake_cuda FAKE_CUDA_TOTAL_BYTES=4G \
    GMEM_TRACE_MAX=100% GMEM_TRACE_KEEP=all \
    "$B/tests/trace_e2e_program" exit 4000 >"$out/program.out" 2>"$out/program.err" &
  pid=$!
  wait $pid
  echo $? >"$out/rc"
  "$B/bin/gmem" stats $pid >"$out/stats.txt" 2>&1
  echo $? >"$out/stats.rc"
  df -k /dev/shm >"$out/df.txt"
' _ "$B" "$out"
ns=$?
fail() { echo "full_shm_test: FAIL: $*"; for f in "$out"/*; do echo "--- $f"; head -20 "$f"; done; exit 1; }
[ $ns = 90 ] && skip "cannot mount a tmpfs in the namespace"
[ $ns = 0 ] || fail "the namespace script failed ($ns)"
[ "$(cat "$out/rc")" = 0 ] || fail "the program exited with $(cat "$out/rc") (135 = SIGBUS)"
grep -q '^ready' "$out/program.out" || fail "the program did not finish its allocations"
warnings=$(grep -c 'gmem: warning: the trace .* stops growing' "$out/program.err")
[ "$warnings" = 1 ] || fail "expected one 'stops growing' warning, saw $warnings"
[ "$(cat "$out/stats.rc")" = 0 ] || fail "gmem stats could not read the trace"
grep -q '^trace full' "$out/stats.txt" || fail "gmem stats does not say the trace is full"
events=$(sed -n 's/^recorded: [0-9]* events ([0-9]* in the ring, \([0-9]*\) lost).*/\1/p' "$out/stats.txt")
allocs=$(sed -n 's/.*live allocations (\([0-9]*\) not recorded).*/\1/p' "$out/stats.txt")
[ -n "$events" ] && [ -n "$allocs" ] && [ $((events + allocs)) -gt 0 ] ||
  fail "the trace does not count what it lost"
echo "full_shm_test: ok: 1 MiB /dev/shm filled, program exited 0, one warning;" \
     "$events events and $allocs allocations counted as not recorded"
