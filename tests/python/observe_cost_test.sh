#!/usr/bin/env bash
# gmem's own time observing a framework's allocations, end to end without a GPU:
# tests/python/observe_cost.py observes 1000 allocations and 600 frees as the CuPy bootstrap
# does; GMEM_VERBOSE=1 prints their count and cost at exit (and how the trace's file grew), and
# `gmem stats` (text and JSON) reads the same counts from the trace. Exit 0 pass, 77 skip (no python3), 1 fail.
set -u
command -v python3 >/dev/null || { echo "observe_cost_test: skipped: python3 not found"; exit 77; }
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
for f in "$GMEM" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
source "$(dirname "$0")/../traced_runs.sh"

GMEM_VERBOSE=1 "$GMEM" run -- python3 tests/python/observe_cost.py >"$W/run.out" 2>"$W/run.err"
rc=$?
PID=$(pid_of "$W/run.err")
PIDS+=("$PID")
[ $rc = 0 ] || { cat "$W/run.err"; fail "gmem run: exit status $rc"; }
line=$(grep '^gmem: observe ' "$W/run.err")
echo "$line"
[[ "$line" =~ allocs=1000\ alloc_ns=([0-9]+)\ frees=600\ free_ns=([0-9]+)\ own_ms=([0-9.]+)\ wall_ms=([0-9.]+)\ share_pct=([0-9.]+) ]] ||
  fail "GMEM_VERBOSE: no 'gmem: observe allocs=1000 ... frees=600 ...' line"
[ "${BASH_REMATCH[1]:-0}" -gt 0 ] && [ "${BASH_REMATCH[2]:-0}" -gt 0 ] ||
  fail "GMEM_VERBOSE: zero ns per observed event"
# How the trace's file grew: at least the first event chunk, made by the thread that recorded.
line=$(grep '^gmem: trace_growth ' "$W/run.err")
echo "$line"
[[ "$line" =~ ^gmem:\ trace_growth\ ahead=[0-9]+\ ahead_mib=[0-9.]+\ ahead_ms=[0-9.]+\ ahead_max_ms=[0-9.]+\ populate_max_ms=[0-9.]+\ stalls=([0-9]+)\ stall_ms=[0-9.]+\ stall_max_ms=[0-9.]+$ ]] ||
  fail "GMEM_VERBOSE: no 'gmem: trace_growth ahead=... stalls=...' line"
[ "${BASH_REMATCH[1]:-0}" -ge 1 ] || fail "GMEM_VERBOSE: trace_growth counts no stall"

"$GMEM" stats "$PID" >"$W/stats.txt" 2>&1 || fail "gmem stats: exit status $?"
grep '^observing:' "$W/stats.txt"
grep -q '^observing: 1000 allocations at [0-9]* ns, 600 frees at [0-9]* ns' "$W/stats.txt" ||
  fail "gmem stats: no observing line with 1000 allocations and 600 frees"
"$GMEM" stats --json "$PID" >"$W/stats.json" 2>&1 || fail "gmem stats --json: exit status $?"
python3 - "$W/stats.json" <<'PY' || fail "gmem stats --json: observed counts"
import json, sys
o = json.load(open(sys.argv[1]))["observed"]
assert o["allocs"] == 1000 and o["frees"] == 600, o
assert o["alloc_ns"] > 0 and o["free_ns"] > 0 and o["wall_ns"] > o["alloc_ns"], o
PY
[ $failures = 0 ] && echo "observe_cost_test: ok" || echo "observe_cost_test: $failures failures"
[ $failures = 0 ]
