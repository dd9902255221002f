#!/usr/bin/env bash
# What a Python program still holds when its code ends is reported as a leak at exit, although
# the interpreter's shutdown frees it (tests/python/held_to_exit.py, fake driver): the run
# summary and `gmem leaks` name exactly the KEPT line, marked "held to exit"; a buffer the
# program released (del) and one an atexit handler released are not leaks; the JSON carries the
# count. Exit 0 pass, 77 skip (no python3), 1 fail.
set -u
command -v python3 >/dev/null || { echo "held_to_exit_test: skipped: python3 not found"; exit 77; }
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
PROG=tests/python/held_to_exit.py
for f in "$GMEM" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FAKE_CUDA_TOTAL_BYTES=512M PYTHONDONTWRITEBYTECODE=1
W=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && "$GMEM" clean --force "$PID" >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
KEPT=$(grep -n -- "# KEPT" "$PROG" | cut -d: -f1)

"$GMEM" run -- python3 "$PROG" >"$W/run.out" 2>"$W/run.err"
rc=$?
cat "$W/run.out" "$W/run.err"
[ $rc = 0 ] || fail "gmem run: exit status $rc"
PID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/run.err")
[ -n "$PID" ] || { fail "no pid in the run summary"; exit 1; }
grep -q "held all run: 1.00 MiB in 1 allocation from 1 site, not leaks" "$W/run.err" ||
  fail "run summary: expected exactly the KEPT buffer, held when the program's code ended"

"$GMEM" leaks --all "$PID" >"$W/leaks.txt"
rc=$?
cat "$W/leaks.txt"
[ $rc = 1 ] || fail "gmem leaks: exit status $rc, expected 1 (leaks)"
grep -q "^#1 1.00 MiB in 1 allocation, .*held to exit$" "$W/leaks.txt" || fail "#1 is not marked held to exit"
grep -A3 "^#1 " "$W/leaks.txt" | grep -q "#1  <module> at held_to_exit.py:$KEPT (python)" ||
  fail "#0 of #1 is not the KEPT line ($KEPT)"
grep -q "^#2 " "$W/leaks.txt" && fail "more than one site: a buffer released by the program counted"

"$GMEM" leaks --all --json "$PID" >"$W/leaks.json"
python3 - "$W/leaks.json" <<'PY' || fail "JSON: held_to_exit counts"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["held_to_exit_count"] == 1 and j["held_to_exit_bytes"] == 1 << 20, j
assert j["sites"][0]["held_to_exit_count"] == 1, j["sites"][0]
PY

# A program that frees nothing before its end: its allocations alone show that it ran.
"$GMEM" run -- python3 "$PROG" --only-kept >"$W/only.out" 2>"$W/only.err" || fail "--only-kept: exit status $?"
PID2=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/only.err")
grep -q "held all run: 1.00 MiB in 1 allocation from 1 site, not leaks" "$W/only.err" ||
  fail "--only-kept: KEPT is not held at exit: $(cat "$W/only.err")"
[ -n "$PID2" ] && "$GMEM" clean --force "$PID2" >/dev/null 2>&1

[ $failures = 0 ] && echo "held_to_exit_test: ok" || echo "held_to_exit_test: $failures failure(s)"
[ $failures = 0 ]
