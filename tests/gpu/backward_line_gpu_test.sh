#!/usr/bin/env bash
# Real PyTorch: gradients allocated on the autograd engine's device thread carry the Python line
# that called backward(), marked "[via backward()]" (the stand-in engine's end-to-end test is
# tests/tools/backward_line_e2e_test.sh). The program keeps every step's weight gradient: the
# leak verdict names the backward() line, and no shown stack has the caching allocator's own
# frames (record_trace, DeviceCachingAllocator) in it.
source "$(dirname "$0")/python_lib.sh"
need_module torch
traced_runs
export GMEM_TRACE=1 PYTHONUNBUFFERED=1
PROG=$here/backward_line_check.py
BACKWARD=$(grep -n "# BACKWARD" "$PROG" | cut -d: -f1)

"$GMEM" run -- "$PY" "$PROG" >"$W/run.out" 2>"$W/run.err"
rc=$?
cat "$W/run.out" "$W/run.err"
[ $rc -eq 0 ] || fail "gmem run exited $rc"
grep -q "pt_autograd_0" "$W/run.out" || echo "note: no thread named pt_autograd_0 (the names are in the threads: line)"
PID=$(pid_of "$W/run.err")
[ -n "$PID" ] || { fail "no pid in the run summary"; end_test backward_line_gpu_test; }
PIDS+=("$PID")
"$GMEM" leaks "$PID" >"$W/leaks.txt"
cat "$W/leaks.txt"
"$GMEM" leaks --all "$PID" >"$W/all.txt"
sed -n '/^#1 /,/^$/p' "$W/leaks.txt" >"$W/site1.txt"
grep -qF "[via backward()] at backward_line_check.py:$BACKWARD (python)" "$W/site1.txt" ||
  fail "the first leak site does not name backward_line_check.py:$BACKWARD via backward()"
# The allocator's frames are folded by their names: they must be symbolized (all frames shown)
# and absent from the default view, or the absence checks nothing.
OWN='record_trace|DeviceCachingAllocator|cudaMallocMaybeCapturing'
"$GMEM" leaks --all --all-frames "$PID" >"$W/frames.txt"
grep -Eq "$OWN" "$W/frames.txt" ||
  fail "no caching-allocator frame symbolized with --all-frames: $(grep -m3 'not symbolized' "$W/frames.txt")"
grep -Eq "$OWN" "$W/all.txt" && fail "the caching allocator's own frames are shown: $(grep -Em3 "$OWN" "$W/all.txt")"
"$GMEM" leaks "$PID" --json >"$W/leaks.json"
"$PY" - "$W/leaks.json" "$BACKWARD" <<'PY' || fail "leaks --json: the backward() line"
import json, sys
d = json.load(open(sys.argv[1]))
line = int(sys.argv[2])
top = d["sites"][0]["frames"][0] if d["sites"] and d["sites"][0]["frames"] else {}
assert top.get("line") == line and top.get("via") == "backward()", d["sites"][:1]
print("leaks --json: the backward() line, via backward()")
PY
end_test backward_line_gpu_test
