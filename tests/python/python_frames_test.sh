#!/usr/bin/env bash
# Python frames end to end, without a GPU: tests/python/leaky_frames.py reaches the fake driver
# through ctypes under `gmem run`; `gmem leaks` must name exactly its leak lines (golden file),
# first (the allocation whose ctypes call released the GIL included: PyTorch and CuPy allocate
# so); the JSON and the PyTorch export carry the same frames; the allocation from a thread
# that runs no Python code keeps its native stack and says why; a running process is answered at its
# Python lines; GMEM_PYTHON_DEPTH=0 records none; interpreter shutdown while threads allocate
# does not crash; headless Chromium paints the report's flame graphs. Exit 0 pass, 1 fail, 77
# when everything else passed but no Chromium could be had (no apt-get to install it).
#   GMEM_UPDATE_GOLDEN=1 bash tests/python/python_frames_test.sh   rewrites the golden file
set -u
command -v python3 >/dev/null || { echo "python_frames_test: python3 not found (scripts/install-deps.sh installs it)"; exit 1; }
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
PROG=tests/python/leaky_frames.py
GOLDEN=tests/python/golden/leaks.txt
for f in "$GMEM" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FAKE_CUDA_TOTAL_BYTES=512M PYTHONDONTWRITEBYTECODE=1
source "$(dirname "$0")/../traced_runs.sh"
line_of() { grep -n -- "$1" "$PROG" | head -1 | cut -d: -f1; }
LEAK_A=$(line_of "# LEAK-A")
LEAK_B=$(line_of "# LEAK-B")
LEAK_C=$(line_of "# LEAK-C")
ALLOC=$(line_of "lib.cuMemAlloc_v2(ctypes.byref")
# pid, ages, and the interpreter's path vary from run to run; lines of the standard library
# from one Python version to the next.
normalize() {
  sed -E -e 's/pid [0-9]+ \([^)]*\)/pid PID (python3 leaky_frames.py)/' \
    -e 's/(oldest|youngest) [0-9.]+ [a-zµ]+/\1 AGE/g' -e 's#shm gmem\.[0-9a-f.]+#shm OBJECT#' \
    -e 's/\([0-9]+ native frames? of/(N native frames of/' -e 's/threading\.py:[0-9]+/threading.py:N/' -e 's/\+0x[0-9a-f]+ \(/+0xN (/'
}

echo "== gmem run -- python3 $PROG"
"$GMEM" run -- python3 "$PROG" >"$W/run.out" 2>"$W/run.err"
rc=$?
cat "$W/run.out" "$W/run.err"
[ $rc = 0 ] || fail "gmem run: exit status $rc"
PID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/run.err")
[ -n "$PID" ] || { fail "no pid in the run summary"; exit 1; }
PIDS+=("$PID")
grep -q "held all run: 7.75 MiB in 7 allocations from 5 sites" "$W/run.err" ||
  fail "run summary: expected 7.75 MiB in 7 allocations from 5 call sites"

echo "== gmem leaks $PID (golden $GOLDEN)"
"$GMEM" leaks --all "$PID" >"$W/leaks.raw"
rc=$?
[ $rc = 1 ] || fail "gmem leaks: exit status $rc, expected 1 (leaks)"
normalize <"$W/leaks.raw" >"$W/leaks.txt"
if [ "${GMEM_UPDATE_GOLDEN:-0}" = 1 ]; then
  mkdir -p "$(dirname "$GOLDEN")" && cp "$W/leaks.txt" "$GOLDEN"
fi
diff -u "$GOLDEN" "$W/leaks.txt" || fail "gmem leaks differs from $GOLDEN"
# Independent of the golden file: the first frame of the Python sites is the marked line's
# caller chain, innermost first.
grep -q "#1  load_weights at leaky_frames.py:$LEAK_A (python)" "$W/leaks.txt" ||
  fail "LEAK-A line $LEAK_A not named"
[ "$(grep -c "#1  Cache.grow at leaky_frames.py:$LEAK_B (python)" "$W/leaks.txt")" = 2 ] ||
  fail "LEAK-B line $LEAK_B not named for both callers"
grep -q "#1  released_gil_worker at leaky_frames.py:$LEAK_C (python)" "$W/leaks.txt" ||
  fail "LEAK-C line $LEAK_C (GIL released) not named"
grep -q "no Python frames: the allocating thread was not running Python code" "$W/leaks.txt" ||
  fail "the native thread's allocation is not explained"

echo "== gmem leaks --json / --native / --all-frames"
"$GMEM" leaks --all "$PID" --json >"$W/leaks.json"
"$GMEM" leaks --all "$PID" --native >"$W/native.txt"
"$GMEM" leaks --all "$PID" --all-frames --frames 64 >"$W/all.txt"
grep -q "(python)" "$W/native.txt" && fail "--native shows Python frames"
grep -q "SUMMARY: 7.75 MiB in 7 allocations from 3 call sites" "$W/native.txt" ||
  fail "--native groups by native stack (3 sites)"
grep -q "_PyEval_EvalFrameDefault" "$W/all.txt" || fail "--all-frames hides the eval loop"
grep -q "load_weights at leaky_frames.py:$LEAK_A (python)" "$W/all.txt" ||
  fail "--all-frames lacks the Python frames"
"$GMEM" leaks --all "$PID" --native --all-frames >/dev/null 2>&1 && fail "--native with --all-frames accepted"
python3 - "$W/leaks.json" "$LEAK_A" "$LEAK_B" "$LEAK_C" <<'PY' || fail "JSON"
import json, sys
doc = json.load(open(sys.argv[1]))
a, b, c = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lines = sorted((s["frames"][1]["function"], s["frames"][1]["line"], s["count"])
               for s in doc["sites"] if s["python_frames"] > 0)
assert lines == [("Cache.grow", b, 1), ("Cache.grow", b, 1), ("load_weights", a, 3),
                 ("released_gil_worker", c, 1)], lines
for s in doc["sites"]:
    if s["python_frames"]:
        f = s["frames"][0]
        assert f["python"] and f["file"].endswith("leaky_frames.py") and f["function"] == "alloc", f
no_gil = [s for s in doc["sites"] if s["python_frames"] == 0]
assert len(no_gil) == 1 and no_gil[0]["bytes"] == 256 << 10, no_gil
assert "not running Python code" in no_gil[0]["python_note"], no_gil
assert doc["suppressed"] == [] and doc["suppressed_count"] == 0
PY

echo "== gmem export --format pytorch: frames like PyTorch's own snapshots"
"$GMEM" export "$PID" --format pytorch -o "$W/snap.pickle" 2>/dev/null || fail "export pytorch"
python3 - "$W/snap.pickle" "$LEAK_A" <<'PY' || fail "pytorch export frames"
import pickle, sys
snap = pickle.load(open(sys.argv[1], "rb"))
found = False
for seg in snap["segments"]:
    for blk in seg["blocks"]:
        fr = blk.get("frames", [])
        if fr and fr[0]["filename"].endswith("leaky_frames.py"):
            assert fr[0]["name"] == "alloc", fr[0]
            found = found or any(f["name"] == "load_weights" and f["line"] == int(sys.argv[2])
                                 for f in fr)
assert found, "no block names load_weights at the LEAK-A line"
PY

echo "== gmem export --format chrome: allocation events name their mixed stack"
"$GMEM" export "$PID" --format chrome -o "$W/chrome.json" 2>/dev/null || fail "export chrome"
python3 - "$W/chrome.json" "$LEAK_A" <<'PY' || fail "chrome export frames"
import json, sys
doc = json.load(open(sys.argv[1]))
frames = doc["stackFrames"]
want = "load_weights (leaky_frames.py:%s)" % sys.argv[2]
hits = 0
for e in doc["traceEvents"]:
    if e.get("cat") != "alloc" or "sf" not in e:
        continue
    node, chain = e["sf"], []
    while node:
        chain.append(frames[node]["name"])
        node = frames[node].get("parent")
    hits += want in chain
assert hits == 3, f"{hits} allocations name {want}, expected 3"
PY

echo "== gmem report: flame graphs of mixed stacks, drawn by the page itself"
"$GMEM" report "$PID" -o "$W/report.html" 2>/dev/null || fail "gmem report"
python3 - "$W/report.html" "$LEAK_A" "$ALLOC" <<'PY' || fail "report HTML"
import re, sys
h = open(sys.argv[1]).read()
assert "<script" not in h and "http://" not in h.replace("http://www.w3.org/2000/svg", ""), "network or script"
flames = re.findall(r'<svg class="flame".*?</svg>', h, re.S)
assert len(flames) == 2, f"{len(flames)} flame graphs, expected 2 (peak, outstanding)"
for f in flames:
    assert "load_weights (leaky_frames.py:%s)" % sys.argv[2] in f, "LEAK-A frame missing"
    assert f.count("<rect") >= 10, "too few frames drawn"
site = "alloc at leaky_frames.py:%s  &lt;  load_weights at leaky_frames.py:%s" % (sys.argv[3], sys.argv[2])
assert site in h, "leak table lacks the Python site " + site
PY
skipped=
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$CHROMIUM" ]; then
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$(mktemp -d "$W/chromium.XXXXXX")" --screenshot="$W/report.png" \
    --window-size=1100,2600 "file://$(realpath "$W/report.html")" >"$W/chromium.log" 2>&1
  read -r _ py _ native < <(python3 tests/python/flame_pixels.py "$W/report.png")
  echo "screenshot: $py Python-frame pixels, $native native-frame pixels"
  [ "${py:-0}" -gt 20000 ] && [ "${native:-0}" -gt 5000 ] || fail "the flame graphs were not painted"
elif command -v apt-get >/dev/null; then
  fail "chromium is missing: scripts/install-deps.sh test installs it"
else
  skipped="the flame graph screenshot (no chromium and no apt-get to install it on this system)"
fi

echo "== a running process: gmem leaks PID names the Python line first"
mkfifo "$W/in"
"$GMEM" run -- python3 "$PROG" --wait <"$W/in" >"$W/wait.out" 2>"$W/wait.err" &
RUNNER=$!
exec 3>"$W/in"
for _ in $(seq 100); do grep -q ready "$W/wait.out" 2>/dev/null && break; sleep 0.1; done
LPID=$(pgrep -f "leaky_frames.py --wait" -P "$RUNNER" | head -1)
[ -n "$LPID" ] && PIDS+=("$LPID")
"$GMEM" leaks --all "${LPID:-0}" >"$W/live.txt"
grep -q "still running" "$W/live.txt" || fail "live: not reported as running"
sed -n '/^#1 /,/^$/p' "$W/live.txt" | grep -q "#1  load_weights at leaky_frames.py:$LEAK_A (python)" ||
  fail "live: the largest site is not named at LEAK-A"
exec 3>&-
wait "$RUNNER" || fail "the waiting program failed"

echo "== non-ASCII files and functions (Latin-1, UCS-2 and UCS-4 strings), GIL released"
mkdir -p "$W/uni"
cat >"$W/uni/données_𝔘.py" <<'PYEOF'
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
def λ_alloc():
    p = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0
def réserver():
    λ_alloc()
réserver()
PYEOF
"$GMEM" run -- python3 "$W/uni/données_𝔘.py" >/dev/null 2>"$W/uni.err"
UPID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/uni.err")
[ -n "$UPID" ] && PIDS+=("$UPID")
"$GMEM" leaks --all "${UPID:-0}" >"$W/uni.txt"
grep -q "#0  λ_alloc at données_𝔘.py:10 (python)" "$W/uni.txt" &&
  grep -q "#1  réserver at données_𝔘.py:12 (python)" "$W/uni.txt" ||
  { fail "non-ASCII function or file name not read"; cat "$W/uni.txt"; }

echo "== frames that change between captures (one thread's frames are remembered)"
# The same frame address runs other lines and other code from one allocation to the next:
# each allocation must carry its own line and function, never the previous capture's.
mkdir -p "$W/memo"
cat >"$W/memo/alternate.py" <<'PYEOF'
import ctypes
cuda = ctypes.PyDLL("libcuda.so.1")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
def alloc(n):
    p = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
def left():
    alloc(1 << 20)
def right():
    alloc(1 << 20)
for i in range(6):
    if i % 2:
        alloc(2 << 20)
    else:
        alloc(3 << 20)
for i in range(6):
    left() if i % 3 else right()
PYEOF
"$GMEM" run -- python3 "$W/memo/alternate.py" >/dev/null 2>"$W/memo.err"
MPID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/memo.err")
[ -n "$MPID" ] && PIDS+=("$MPID")
"$GMEM" leaks --all --json "${MPID:-0}" >"$W/memo.json"
python3 - "$W/memo.json" <<'PY' || fail "an allocation carries another capture's Python frames"
import collections, json, sys
sites = collections.Counter()
for s in json.load(open(sys.argv[1]))["sites"]:
    py = [f for f in s["frames"] if f.get("python")]
    key = tuple((f["function"], f["line"]) for f in py[:2])
    sites[(s["bytes"] // s["count"], key)] += s["count"]
want = {(3 << 20, (("alloc", 9), ("<module>", 18))): 3,
        (2 << 20, (("alloc", 9), ("<module>", 16))): 3,
        (1 << 20, (("alloc", 9), ("left", 11))): 4,
        (1 << 20, (("alloc", 9), ("right", 13))): 2}
assert sites == want, f"sites {dict(sites)}, expected {want}"
PY

echo "== GMEM_PYTHON_DEPTH=0"
GMEM_PYTHON_DEPTH=0 "$GMEM" run -- python3 "$PROG" >/dev/null 2>"$W/off.err"
OPID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/off.err")
[ -n "$OPID" ] && PIDS+=("$OPID")
"$GMEM" leaks --all "${OPID:-0}" >"$W/off.txt"
# The absence checks below mean something only if the report lists the leaks, by native frames.
grep -q '^#1 ' "$W/off.txt" && grep -q '^SUMMARY: 7.75 MiB in 7 allocations' "$W/off.txt" ||
  fail "GMEM_PYTHON_DEPTH=0: no leak report to check: $(head -3 "$W/off.txt")"
grep -q "(python)" "$W/off.txt" && fail "GMEM_PYTHON_DEPTH=0 still records Python frames"
grep -q "Python code" "$W/off.txt" && fail "GMEM_PYTHON_DEPTH=0 still records Python notes"

echo "== interpreter shutdown while threads allocate (5 runs)"
for i in 1 2 3 4 5; do
  GMEM_TRACE_KEEP=none "$GMEM" run -- python3 "$PROG" --stress >"$W/stress.out" 2>"$W/stress.err"
  rc=$?
  [ $rc = 0 ] || { fail "stress run $i: exit status $rc"; cat "$W/stress.err"; }
done

if [ $failures != 0 ]; then
  echo "python_frames_test: $failures failures"
  exit 1
fi
[ -z "$skipped" ] && echo "python_frames_test: PASS" && exit 0
echo "python_frames_test: skipped part: $skipped"
exit 77
