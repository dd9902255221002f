#!/usr/bin/env bash
# End to end on the fake driver (no GPU): `gmem leaks --growth`, `gmem diff` and `gmem oom` on
# real traces. A service leaking 64 KiB every 100 ms at leak_slowly() (and holding 8 MiB at
# hold_model()) is saved twice, 1.5 s apart; leak_sites under a 20 MiB GMEM_LIMIT fails its
# 40 MiB allocation with out of memory. Also bad input and --help.
set -u
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
SVC=$B/tests/exporter/steady_service
LEAK=$B/tests/tools/leak_sites
for f in "$GMEM" "$SVC" "$LEAK" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
JOB=
before_cleanup() {
  touch "$W/stop"
  [ -n "$JOB" ] && { kill "$JOB" 2>/dev/null; wait "$JOB" 2>/dev/null; }
}
source "$(dirname "$0")/../traced_runs.sh"
expect_rc() { [ "$1" = "$2" ] || fail "$3: exit status $2, expected $1"; }

echo "== --help"
for c in "leaks" "diff" "oom" "exporter"; do
  "$GMEM" $c --help >"$W/help.txt" 2>&1
  expect_rc 0 $? "gmem $c --help"
done
grep -q -- "--growth" <("$GMEM" leaks --help) || fail "leaks --help lacks --growth"

echo "== a leaking service, saved twice"
"$GMEM" run -- "$SVC" leak "$W/stop" >"$W/svc.out" 2>"$W/svc.err" &
JOB=$!
for _ in $(seq 100); do grep -q '^ready' "$W/svc.out" 2>/dev/null && break; sleep 0.1; done
PID=$(sed -n 's/^ready \([0-9]*\)/\1/p' "$W/svc.out")
[ -n "$PID" ] || { fail "service did not start"; cat "$W/svc.err"; exit 1; }
PIDS+=("$PID")
sleep 0.5
"$GMEM" save "$PID" "$W/a.gmem" 2>/dev/null || fail "save a"
sleep 1.5
"$GMEM" save "$PID" "$W/b.gmem" 2>/dev/null || fail "save b"
"$GMEM" leaks --growth=1s "$PID" --json >"$W/growth.json"
expect_rc 1 $? "leaks --growth (a site grew)"
"$GMEM" leaks --growth "$PID" >"$W/growth.txt"  # the pid after a bare --growth is the target
expect_rc 1 $? "leaks --growth PID"
grep -q "Window: the last 10m00s" "$W/growth.txt" || fail "default window"
"$GMEM" diff "$W/a.gmem" "$W/b.gmem" --json >"$W/diff.json"
expect_rc 1 $? "diff (B holds more)"
"$GMEM" diff "$W/a.gmem" "$W/b.gmem" >"$W/diff.txt"
cat "$W/diff.txt"
python3 - "$W/growth.json" "$W/diff.json" <<'PY' || fail "growth and diff values"
import json, sys
g = json.load(open(sys.argv[1]))
d = json.load(open(sys.argv[2]))
def site(doc, fn):
    hits = [s for s in doc["sites"] if fn in s["caller"]]
    assert len(hits) == 1, (fn, [s["caller"] for s in doc["sites"]])
    return hits[0]
leak, model = site(g, "leak_slowly"), site(g, "hold_model")
# 64 KiB every 100 ms: about 10 in a 1 s window.
assert leak["growth_bytes"] % (64 << 10) == 0 and 5 <= leak["growth_bytes"] // (64 << 10) <= 13, leak
assert model["growth_bytes"] == 0 and model["live_bytes"] == 8 << 20, model
assert g["sites"][0]["site"] == leak["site"], "the leak ranks first"
assert d["same_process"], d
dl, dm = site(d, "leak_slowly"), site(d, "hold_model")
assert dl["freed_count"] == 0 and dl["added_count"] >= 8, dl  # 1.5 s apart: ~15 leaked
assert dl["net_bytes"] == dl["added_bytes"] == dl["added_count"] * (64 << 10), dl
assert dm["net_bytes"] == 0 and dm["added_count"] == 0 and dm["freed_count"] == 0, dm
assert d["total"]["net_bytes"] == dl["net_bytes"], d["total"]
print(f"growth: leak +{leak['growth_bytes']} B in 1 s, model 0; diff: +{dl['added_count']} leaked, nothing freed")
PY
"$GMEM" diff "$W/b.gmem" "$W/b.gmem" >/dev/null
expect_rc 0 $? "diff of a trace with itself"
touch "$W/stop"
wait "$JOB"
JOB=

echo "== an OOM under GMEM_LIMIT"
"$GMEM" run --limit 20M -- "$LEAK" >"$W/oom.out" 2>"$W/oom.err"
OPID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/oom.err")
[ -n "$OPID" ] || { fail "no pid in the run summary"; cat "$W/oom.err"; }
PIDS+=("$OPID")
# The shim's report on stderr, once, where the job's log has it.
cat "$W/oom.err"
[ "$(grep -c 'gmem: OUT OF MEMORY' "$W/oom.err")" = 1 ] || fail "OOM report: not exactly once"
grep -q "40.0 MiB requested on device 0" "$W/oom.err" || fail "OOM report: request"
grep -q "device free .* pool limit 20.0 MiB" "$W/oom.err" || fail "OOM report: free and limit"
grep -q "pool: reserved .*, live 10.0 MiB, cached free .*, pending .*; fragmentation .*, largest free block" \
  "$W/oom.err" || fail "OOM report: pool state"
grep -q "10.0 MiB in 5 allocations  leak_sites" "$W/oom.err" || fail "OOM report: top holder"
grep -q "gmem oom $OPID" "$W/oom.err" || fail "OOM report: points at gmem oom"
"$GMEM" run --limit 20M -e GMEM_OOM_REPORT=0 -- "$LEAK" >/dev/null 2>"$W/oom0.err"
P0=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/oom0.err")
[ -n "$P0" ] && PIDS+=("$P0")
# The run must have met the OOM (its trace records it) for the absence of a report to count.
grep -q "cuMemAlloc(41943040) failed" "$W/oom0.err" ||
  fail "GMEM_OOM_REPORT=0: the program did not fail its 40 MiB allocation"
"$GMEM" oom "${P0:-0}" >/dev/null 2>&1
expect_rc 1 $? "GMEM_OOM_REPORT=0: gmem oom finds the recorded OOM"
grep -q "OUT OF MEMORY" "$W/oom0.err" && fail "GMEM_OOM_REPORT=0 still reports"
"$GMEM" oom "$OPID" >"$W/oom.txt"
expect_rc 1 $? "gmem oom (one recorded)"
cat "$W/oom.txt"
grep -q "request of 40.0 MiB" "$W/oom.txt" || fail "oom: request size"
grep -q "limit 20.0 MiB" "$W/oom.txt" || fail "oom: limit from the snapshot"
grep -q "leak_weights" "$W/oom.txt" || fail "oom: the 10 MiB holder (leak_weights) named"
"$GMEM" oom "$OPID" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
o = d["ooms"][0]
assert o["holders_exact"] and o["at_failure"]["limit_bytes"] == 20 << 20, o
assert o["holders"][0]["bytes"] == 10 << 20, o["holders"][0]
' || fail "oom --json"
"$GMEM" oom "$W/a.gmem" >/dev/null
expect_rc 0 $? "gmem oom without OOMs"

echo "== bad input"
"$GMEM" leaks --growth=banana "$PID" >/dev/null 2>"$W/e.txt"
expect_rc 2 $? "leaks --growth=banana"
grep -q "is not a positive duration" "$W/e.txt" || fail "growth error message"
"$GMEM" diff "$W/a.gmem" "$W/nope" >/dev/null 2>&1
expect_rc 3 $? "diff with a missing file"
head -c 3000 "$W/a.gmem" >"$W/trunc.gmem"
"$GMEM" diff "$W/a.gmem" "$W/trunc.gmem" >/dev/null 2>&1
expect_rc 4 $? "diff with a truncated trace"
"$GMEM" oom "$W/trunc.gmem" >/dev/null 2>&1
expect_rc 4 $? "oom of a truncated trace"
mkfifo "$W/fifo"
timeout 10 "$GMEM" oom "$W/fifo" >/dev/null 2>&1
rc=$?
[ $rc -ne 124 ] && [ $rc -ne 0 ] || fail "oom on a FIFO: status $rc (hung or accepted)"
"$GMEM" exporter --growth-window 0 >/dev/null 2>&1
expect_rc 2 $? "exporter --growth-window 0"
"$GMEM" exporter --listen 127.0.0.1:99999 >/dev/null 2>&1
expect_rc 2 $? "exporter --listen with a bad port"

[ $failures -eq 0 ] && echo "analyses_e2e_test: all passed"
[ $failures -eq 0 ]
