#!/usr/bin/env bash
# A pool's figures outlive its context, without a GPU: a driver program linked against the fake
# libcuda.so.1 creates its own context (cuCtxCreate), allocates device and pinned host memory,
# leaves three device blocks to the context and destroys it before exit. The exit summary
# (GMEM_VERBOSE), gmem stats, leaks, frag, report and both exports must still count its
# pools; the blocks released with the context are neither leaks nor mapped segments.
# Exit 0 pass, 1 fail.
set -u
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
PROBE=$B/tests/interpose/shim_probe_linked
for f in "$GMEM" "$PROBE" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "contexts_test: missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
W=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && "$GMEM" clean --force "$PID" >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
field() { # json-free: NAME=VALUE from the first line matching $1 in file $2
  grep -m1 -- "$1" "$2" | tr ' ' '\n' | sed -n "s/^$3=//p"
}

echo "== gmem run: a private context destroyed before exit"
"$GMEM" run -e GMEM_VERBOSE=1 -e GMEM_TRACE_SAVE="$W/t.gmem" -e GMEM_SAMPLE_MS=60000 -- \
  "$PROBE" exported private_context >"$W/out" 2>"$W/err"
rc=$?
cat "$W/out" "$W/err"
[ "$rc" = 0 ] || fail "gmem run: exit status $rc"
PID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/err")
[ -n "$PID" ] || fail "no pid in the run summary"

# The exit summary's pool lines (GMEM_VERBOSE): the destroyed context's pools at the drop.
line="gmem: pool device=0 kind=device context=destroyed"
grep -q "^$line " "$W/err" || fail "no '$line' line at exit"
[ "$(field "^$line " "$W/err" total_allocs)" = 6 ] || fail "destroyed pool: total_allocs"
[ "$(field "^$line " "$W/err" total_frees)" = 3 ] || fail "destroyed pool: total_frees"
[ "$(field "^$line " "$W/err" live_blocks)" = 3 ] || fail "destroyed pool: live_blocks at the drop"
hline="gmem: pool device=0 kind=host context=destroyed"
[ "$(field "^$hline " "$W/err" total_allocs)" = 1 ] || fail "destroyed host pool: total_allocs"
# The run summary (read from the trace): allocations counted, nothing leaked.
grep -q "7 allocations" "$W/err" || fail "run summary does not count the 7 allocations"
grep -q "LEAKS" "$W/err" && fail "run summary reports the blocks released with the context as leaks"

for target in "$PID" "$W/t.gmem"; do
  echo "== gmem stats $target"
  "$GMEM" stats "$target" >"$W/stats" 2>&1 || fail "gmem stats $target"
  cat "$W/stats"
  grep -q "No pool counters recorded" "$W/stats" && fail "gmem stats $target: no pool counters"
  "$GMEM" stats "$target" --json >"$W/stats.json" || fail "gmem stats --json $target"
  python3 - "$W/stats.json" <<'PY' || fail "gmem stats --json $target: figures"
import json, sys
s = json.load(open(sys.argv[1]))
devs = {d["device"]: d for d in s["devices"]}
assert 0 in devs and -1 in devs, f"devices {sorted(devs)}"
d, h = devs[0], devs[-1]
def stat(x, name):
    return x["counters"][name]
assert stat(d, "total_allocs") == 6, d
assert stat(d, "total_frees") == 3, d
assert stat(d, "live_bytes") == 0 and stat(d, "reserved_bytes") == 0, d
assert stat(d, "segment_maps") == stat(d, "segment_unmaps") >= 1, d
assert stat(d, "peak_live_bytes") >= 2100000, d
assert stat(h, "total_allocs") == 1, h
PY
  "$GMEM" leaks "$target" >"$W/leaks" 2>&1
  rc=$?
  [ "$rc" = 0 ] || { cat "$W/leaks"; fail "gmem leaks $target: exit status $rc (released blocks are no leaks)"; }
  "$GMEM" frag "$target" --json >"$W/frag.json" || fail "gmem frag $target"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
d = r['devices']; assert d and all(not x['segments'] for x in d), r" "$W/frag.json" ||
    fail "gmem frag $target still shows the destroyed context's segments"
done

echo "== report and exports"
"$GMEM" report "$W/t.gmem" -o "$W/r.html" || fail "gmem report"
grep -q "context destroyed (device 0)" "$W/r.html" || fail "report: no marker for the destroyed context"
grep -q "No pooled memory was recorded" "$W/r.html" && fail "report: no pooled memory"
"$GMEM" export "$W/t.gmem" --format chrome -o "$W/t.json" || fail "export chrome"
python3 - "$W/t.json" <<'PY' || fail "chrome export: no counters of device 0"
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
counters = [e for e in ev if e.get("ph") == "C"]
assert counters, "no counter events"
assert any("context destroyed" in json.dumps(e) for e in ev), "no marker"
PY
"$GMEM" export "$W/t.gmem" --format pytorch -o "$W/t.pickle" || fail "export pytorch"

echo "contexts_test: $failures failures"
[ "$failures" -eq 0 ]
