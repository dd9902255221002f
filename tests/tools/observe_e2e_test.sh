#!/usr/bin/env bash
# Per-tensor observation of PyTorch's caching allocator with no variable set (issue 32), end to
# end without a GPU: a real python3 under `gmem run` (and under a plain LD_PRELOAD) imports a
# stand-in `torch` package (tests/tools/fake_torch) whose libc10_cuda.so is the stand-in of
# tests/tools/fake_framework_libs.cpp: an allocator object with PyTorch 2.11's vtable slot and
# TraceEntry layout, one 64 MiB cache segment from the (fake) driver, and a tensor per
# torch.empty(). Checks: gmem's bootstrap attaches after CUDA's lazy initialization and says so
# in one line; each tensor is in the trace (kind tensor) with its Python line first; the cache
# segment is reported as the cache, not as a leak, while running and at exit; frees during the
# program are recorded and the interpreter's teardown is not; garbage from the allocator stops
# observation with one warning; unknown versions and other backends are refused by name;
# GMEM_FRAMEWORKS=off does nothing; the user's sitecustomize still runs and PYTHONPATH is the
# user's again in the program and its children; a bootstrap directory others can write to is
# refused.
set -u
B=$(cd "${GMEM_BUILD:-build}" && pwd)
GMEM=$B/bin/gmem
SRC=$(cd "$(dirname "$0")" && pwd)
for f in "$GMEM" "$B/lib/libgmem.so" "$B/lib/gmem/bootstrap/sitecustomize.py" \
  "$B/tests/tools/fw/libc10_cuda.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 0; }
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset GMEM_FRAMEWORKS PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF \
  FAKE_TORCH_VERSION FAKE_TORCH_BACKEND PYTHONPATH PYTHONSTARTUP LD_PRELOAD
W=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do "$GMEM" clean --force "$p" >/dev/null 2>&1; done
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has() { grep -qF -- "$2" "$1" || fail "$3: no '$2' in $1: $(cat "$1")"; }
hasnt() { grep -qF -- "$2" "$1" && fail "$3: '$2' in $1: $(cat "$1")"; }

# The stand-in torch package, on a PYTHONPATH of the user's.
# Under site-packages/, where frameworks' own Python frames are folded from stacks.
mkdir -p "$W/site/lib/site-packages"
cp -r "$SRC/fake_torch/torch" "$W/site/lib/site-packages/"
mkdir -p "$W/site/lib/site-packages/torch/lib"
cp "$B/tests/tools/fw/libc10_cuda.so" "$W/site/lib/site-packages/torch/lib/"
# The user's own sitecustomize, which gmem's must not shadow.
mkdir -p "$W/user"
cat >"$W/user/sitecustomize.py" <<'EOF'
import os
os.environ["USER_SITECUSTOMIZE_RAN"] = "1"
EOF
export PYTHONPATH=$W/site/lib/site-packages:$W/user

# The program: five 4 MiB tensors kept from remember()'s line, 20 freed by churn(); with an
# argument it waits at that point until the test has looked at it.
cat >"$W/prog.py" <<'EOF'
import os, subprocess, sys, time
import torch

if os.environ.get("GARBAGE"):  # before any tensor: within the events the shim checks
    torch.cuda.init()
    torch._lib.fake_c10_cuda_emit(99, 0, 0, 0)
    torch._lib.fake_c10_cuda_emit(99, 0, 0, 0)

def remember(kept):
    kept.append(torch.empty(4 << 20))

def step(kept):
    remember(kept)

def churn():
    for _ in range(20):
        t = torch.empty(1 << 20)
        del t

kept = []
for _ in range(5):
    step(kept)
churn()
print("sitecustomize", os.environ.get("USER_SITECUSTOMIZE_RAN"))
print("PYTHONPATH", os.environ.get("PYTHONPATH"))
print("child", subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('PYTHONPATH'))"],
                              capture_output=True, text=True, env=dict(os.environ, LD_PRELOAD="")).stdout.strip())
if len(sys.argv) > 1:
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    while not os.path.exists(sys.argv[1] + ".done"):
        time.sleep(0.02)
EOF

pid_of() { sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$1"; }

echo "== gmem run -- python3 prog.py: while running"
"$GMEM" run -- python3 "$W/prog.py" "$W/ready" >"$W/run.out" 2>"$W/run.err" &
RUN=$!
for _ in $(seq 500); do [ -e "$W/ready" ] && break; sleep 0.02; done
if [ -e "$W/ready" ]; then
  LIVE_PID=$(cat "$W/ready")
  "$GMEM" leaks "$LIVE_PID" >"$W/live.txt" 2>&1
  cat "$W/live.txt"
  sed -n '/^#1 /,/^$/p' "$W/live.txt" >"$W/live1.txt"
  has "$W/live1.txt" "#1 20.0 MiB in 5 allocations" "live leaks #1"
  has "$W/live1.txt" "#0  remember at prog.py:10" "live leaks #1: the tensor's line first"
  grep -q "^#2 " "$W/live.txt" && fail "live leaks: a second site (the cache counted as a leak?)"
  has "$W/live.txt" "PyTorch's caching allocator: 64.0 MiB in 1 allocation from 1 call site are memory it keeps for reuse, not leaks; 20.0 MiB of it in live tensors" "live leaks: the cache"
else
  fail "the program never got ready: $(cat "$W/run.err")"
fi
touch "$W/ready.done"
wait $RUN
rc=$?
cat "$W/run.err"
[ $rc -eq 0 ] || fail "gmem run exited $rc"
PID=$(pid_of "$W/run.err")
[ -n "$PID" ] && PIDS+=("$PID")
has "$W/run.err" "gmem: PyTorch 2.11: caching allocator kept (CUDA graphs work); each tensor traced with its line" "the one line"
[ "$(grep -c '^gmem: PyTorch 2' "$W/run.err")" -eq 1 ] || fail "more than one PyTorch line"
has "$W/run.out" "sitecustomize 1" "the user's sitecustomize ran"
has "$W/run.out" "PYTHONPATH $W/site/lib/site-packages:$W/user" "PYTHONPATH is the user's in the program"
has "$W/run.out" "child $W/site/lib/site-packages:$W/user" "PYTHONPATH is the user's in a child"

echo "== at exit: the tensors kept to the end, the cache apart"
has "$W/run.err" "gmem: LEAKS: 20.0 MiB in 5 allocations from 1 call sites were never freed" "summary"
has "$W/run.err" "gmem: PyTorch's caching allocator holds 64.0 MiB in 1 allocations at exit: memory it keeps for reuse, not leaks; 20.0 MiB of it in live tensors" "summary: the cache"
if [ -n "$PID" ]; then
  "$GMEM" leaks "$PID" >"$W/exit.txt"
  has "$W/exit.txt" "#1 20.0 MiB in 5 allocations" "exit leaks"
  has "$W/exit.txt" "#0  remember at prog.py:10" "exit leaks: the line"
  has "$W/exit.txt" "step at prog.py:13" "exit leaks: its caller"
  "$GMEM" leaks "$PID" --json >"$W/exit.json"
  python3 - "$W/exit.json" <<'PY' || fail "gmem leaks --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["total_bytes"] == 20 << 20 and d["total_count"] == 5, (d["total_bytes"], d["total_count"])
assert d["tensor_bytes"] == 20 << 20 and d["tensor_count"] == 5, d["tensor_bytes"]
assert d["sites"][0]["kinds"] == ["tensor"], d["sites"][0]["kinds"]
assert d["cached_bytes"] == 64 << 20, d["cached_bytes"]
assert d["framework_caches"][0]["tensors_observed"] is True
print("leaks --json: 5 tensors, the cache apart")
PY
  "$GMEM" export "$PID" --format pytorch -o "$W/snap.pickle" 2>"$W/export.err" || fail "export pytorch: $(cat "$W/export.err")"
  python3 - "$W/snap.pickle" <<'PY' || fail "export --format pytorch: tensors as blocks"
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
active = [b for s in d["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
assert sorted(b["requested_size"] for b in active) == [4 << 20] * 5, [b["size"] for b in active]
allocs = [e for t in d["device_traces"] for e in t if e["action"] == "alloc"]
assert len(allocs) == 25, len(allocs)  # the tensors, not the cache's segment
print("export pytorch: 5 active tensors, 25 allocs")
PY
  "$GMEM" export "$PID" --format chrome -o "$W/trace.json" 2>/dev/null || fail "export chrome"
fi

echo "== plain LD_PRELOAD, the documented container path"
LD_PRELOAD=$B/lib/libgmem.so python3 "$W/prog.py" >"$W/pre.out" 2>"$W/pre.err"
cat "$W/pre.err"
has "$W/pre.err" "gmem: PyTorch 2.11: caching allocator kept" "LD_PRELOAD: the one line"
has "$W/pre.out" "sitecustomize 1" "LD_PRELOAD: the user's sitecustomize ran"

echo "== garbage from the allocator: one warning, observation off"
GARBAGE=1 "$GMEM" run -- python3 "$W/prog.py" >"$W/bad.out" 2>"$W/bad.err"
cat "$W/bad.err"
P=$(pid_of "$W/bad.err"); [ -n "$P" ] && PIDS+=("$P")
has "$W/bad.err" "gmem: warning: PyTorch 2.11: the allocator's trace reported action 99 is out of range; per-tensor observation stopped" "garbage"
[ "$(grep -c 'per-tensor observation stopped' "$W/bad.err")" -eq 1 ] || fail "garbage: not one warning"
hasnt "$W/bad.err" "LEAKS" "garbage: no tensor recorded after it"
has "$W/bad.err" "its cached segments, not your tensors" "garbage: the cache as without observation"

echo "== a version without a verified row is refused by name"
FAKE_TORCH_VERSION=2.99.1 "$GMEM" run -- python3 "$W/prog.py" >/dev/null 2>"$W/ver.err"
cat "$W/ver.err"
P=$(pid_of "$W/ver.err"); [ -n "$P" ] && PIDS+=("$P")
has "$W/ver.err" "gmem: PyTorch 2.99: per-tensor observation not available (gmem knows the allocator of PyTorch 2.11)" "unknown version"
has "$W/ver.err" "gmem: PyTorch's caching allocator holds 64.0 MiB in 1 allocations at exit: its cached segments, not your tensors" "unknown version: today's recognition"
hasnt "$W/ver.err" "LEAKS" "unknown version"

echo "== another backend, explicit values"
FAKE_TORCH_BACKEND=cudaMallocAsync "$GMEM" run -- python3 "$W/prog.py" >/dev/null 2>"$W/async.err"
P=$(pid_of "$W/async.err"); [ -n "$P" ] && PIDS+=("$P")
has "$W/async.err" "gmem: PyTorch 2.11: allocator backend cudaMallocAsync as set: each tensor is served and traced by gmem's stream-ordered path" "backend"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$GMEM" run -- python3 "$W/prog.py" >/dev/null 2>"$W/nocache.err"
P=$(pid_of "$W/nocache.err"); [ -n "$P" ] && PIDS+=("$P")
has "$W/nocache.err" "gmem: PyTorch 2.11: PYTORCH_NO_CUDA_MEMORY_CACHING=1 as set" "explicit value wins"
hasnt "$W/nocache.err" "caching allocator kept" "explicit value wins"

echo "== GMEM_FRAMEWORKS=off: nothing"
GMEM_FRAMEWORKS=off "$GMEM" run -- python3 "$W/prog.py" >"$W/off.out" 2>"$W/off.err"
P=$(pid_of "$W/off.err"); [ -n "$P" ] && PIDS+=("$P")
hasnt "$W/off.err" "gmem: PyTorch 2" "off"
has "$W/off.out" "sitecustomize 1" "off: the user's sitecustomize"
has "$W/off.out" "PYTHONPATH $W/site/lib/site-packages:$W/user" "off: PYTHONPATH untouched"

echo "== a bootstrap directory others can write to is refused"
cp -r "$B/lib" "$W/lib"
chmod o+w "$W/lib/gmem/bootstrap"
LD_PRELOAD=$W/lib/libgmem.so python3 "$W/prog.py" >"$W/ww.out" 2>"$W/ww.err"
has "$W/ww.err" "gmem: warning: Python bootstrap not used ($W/lib/gmem/bootstrap is writable by others)" "world-writable"
hasnt "$W/ww.err" "caching allocator kept" "world-writable"
has "$W/ww.out" "sitecustomize 1" "world-writable: the program still runs"

echo "== a program without torch imports nothing of it"
LD_PRELOAD=$B/lib/libgmem.so python3 -c 'import sys; print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "cupy", "ctypes")))' >"$W/none.out" 2>&1
has "$W/none.out" "[]" "no torch, cupy or ctypes imported by the bootstrap"

[ $failures -eq 0 ] && echo "observe_e2e_test: all passed"
exit $((failures > 0))
