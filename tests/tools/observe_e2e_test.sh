#!/usr/bin/env bash
# Per-tensor observation of PyTorch's caching allocator with no variable set, end to
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
# refused, as is one under a directory others can write to.
set -u
source "$(dirname "$0")/fake_torch_env.sh"
source "$(dirname "$0")/../traced_runs.sh"
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
import importlib.util, os, subprocess, sys, time
importlib.util.find_spec("torch")  # what libraries do to see whether it is installed
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


echo "== gmem run -- python3 prog.py: while running"
"$GMEM" run -- python3 "$W/prog.py" "$W/ready" >"$W/run.out" 2>"$W/run.err" &
RUN=$!
for _ in $(seq 500); do [ -e "$W/ready" ] && break; sleep 0.02; done
if [ -e "$W/ready" ]; then
  LIVE_PID=$(cat "$W/ready")
  "$GMEM" leaks --all "$LIVE_PID" >"$W/live.txt" 2>&1
  cat "$W/live.txt"
  sed -n '/^#1 /,/^$/p' "$W/live.txt" >"$W/live1.txt"
  has "$W/live1.txt" "#1 20.0 MiB in 5 allocations" "live leaks #1"
  has "$W/live1.txt" "#0  remember at prog.py:11" "live leaks #1: the tensor's line first"
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
has "$W/run.err" "gmem: held all run: 20.0 MiB in 5 allocations from 1 site, not leaks" "summary"
has "$W/run.err" "gmem: PyTorch's caching allocator holds 64.0 MiB in 1 allocation at exit: memory it keeps for reuse, not leaks; 20.0 MiB of it in live tensors" "summary: the cache"
if [ -n "$PID" ]; then
  "$GMEM" leaks --all "$PID" >"$W/exit.txt"
  has "$W/exit.txt" "#1 20.0 MiB in 5 allocations" "exit leaks"
  has "$W/exit.txt" "#0  remember at prog.py:11" "exit leaks: the line"
  has "$W/exit.txt" "step at prog.py:14" "exit leaks: its caller"
  "$GMEM" leaks --all "$PID" --json >"$W/exit.json"
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
  "$GMEM" report "$PID" -o "$W/report.html" 2>/dev/null || fail "gmem report"
  has "$W/report.html" "holds 64.0 MiB in 1 allocation, not counted above: memory it keeps for reuse, not leaks; 20.0 MiB of it in live tensors" "report: the cache"
  timeout 10 "$GMEM" top "$PID" >"$W/top.txt" 2>&1 </dev/null
  has "$W/top.txt" "20.0 MiB of it in 5 tensors inside frameworks' caches" "top: the tensors within the live bytes"
fi

echo "== plain LD_PRELOAD, the documented container path"
GMEM_TRACE_KEEP=none LD_PRELOAD=$B/lib/libgmem.so python3 "$W/prog.py" >"$W/pre.out" 2>"$W/pre.err"
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
has "$W/ver.err" "gmem: PyTorch's caching allocator holds 64.0 MiB in 1 allocation at exit: its cached segments, not your tensors" "unknown version: today's recognition"
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
GMEM_TRACE_KEEP=none LD_PRELOAD=$W/lib/libgmem.so python3 "$W/prog.py" >"$W/ww.out" 2>"$W/ww.err"
has "$W/ww.err" "gmem: warning: Python bootstrap not used ($W/lib/gmem/bootstrap is writable by others)" "world-writable"
hasnt "$W/ww.err" "caching allocator kept" "world-writable"
has "$W/ww.out" "sitecustomize 1" "world-writable: the program still runs"
# A directory above it that others can write to: they could rename the bootstrap away and
# put their own in its place.
chmod o-w "$W/lib/gmem/bootstrap"
chmod o+w "$W/lib"
GMEM_TRACE_KEEP=none LD_PRELOAD=$W/lib/libgmem.so python3 "$W/prog.py" >"$W/wp.out" 2>"$W/wp.err"
has "$W/wp.err" "gmem: warning: Python bootstrap not used ($W/lib is writable by others)" "parent world-writable"
hasnt "$W/wp.err" "caching allocator kept" "parent world-writable"
chmod o-w "$W/lib"

echo "== JAX: served by gmem's pool unless the user chose otherwise"
mkdir -p "$W/site/lib/site-packages/jax"
cat >"$W/site/lib/site-packages/jax/__init__.py" <<'EOF'
import os
print("jax sees", os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR"), os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"))
EOF
GMEM_TRACE_KEEP=none LD_PRELOAD=$B/lib/libgmem.so python3 -c 'import jax' >"$W/jax.out" 2>"$W/jax.err"
has "$W/jax.out" "jax sees platform false" "JAX: the variables set before it runs"
has "$W/jax.err" "gmem: JAX: XLA's arena cannot be observed per array; set XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false: each array comes from gmem's pool, traced with its line" "JAX: the one line"
GMEM_TRACE_KEEP=none XLA_PYTHON_CLIENT_ALLOCATOR=bfc LD_PRELOAD=$B/lib/libgmem.so python3 -c 'import jax' >"$W/jax2.out" 2>"$W/jax2.err"
has "$W/jax2.out" "jax sees bfc false" "JAX: an explicit value wins"
has "$W/jax2.err" "kept as you set them: XLA_PYTHON_CLIENT_ALLOCATOR=bfc" "JAX: says what it kept"
GMEM_TRACE_KEEP=none GMEM_FRAMEWORKS=off LD_PRELOAD=$B/lib/libgmem.so python3 -c 'import jax' >"$W/jax3.out" 2>"$W/jax3.err"
has "$W/jax3.out" "jax sees None None" "JAX: off sets nothing"
hasnt "$W/jax3.err" "gmem:" "JAX: off says nothing"

echo "== CuPy: its memory hooks, on the importing thread and threads started after"
# A stand-in with CuPy's MemoryHook API (thread-local hooks entered with `with hook:`) and a
# pool that calls them around each block it hands out and takes back.
mkdir -p "$W/site/lib/site-packages/cupy/cuda"
cat >"$W/site/lib/site-packages/cupy/__init__.py" <<'EOF'
from .cuda import memory_hook
_next = [0x7f5000000000]

class ndarray:
    def __init__(self, nbytes):
        self.nbytes = nbytes
        self.ptr = _next[0]
        _next[0] += (nbytes + 511) // 512 * 512
        for h in memory_hook.get_memory_hooks().values():
            h.malloc_postprocess(device_id=0, size=nbytes, mem_size=nbytes, mem_ptr=self.ptr, pmem_id=0)

    def __del__(self):
        for h in memory_hook.get_memory_hooks().values():
            h.free_preprocess(device_id=0, mem_size=self.nbytes, mem_ptr=self.ptr, pmem_id=0)

def empty(nbytes):
    return ndarray(nbytes)
EOF
touch "$W/site/lib/site-packages/cupy/cuda/__init__.py"
cat >"$W/site/lib/site-packages/cupy/cuda/memory_hook.py" <<'EOF'
import collections, threading
thread_local = threading.local()

def get_memory_hooks():
    if not hasattr(thread_local, "memory_hooks"):
        thread_local.memory_hooks = collections.OrderedDict()
    return thread_local.memory_hooks

class MemoryHook:
    name = "MemoryHook"
    def __enter__(self):
        hooks = get_memory_hooks()
        if self.name in hooks:
            raise RuntimeError("hook %s already exists" % self.name)
        hooks[self.name] = self
        return self
    def __exit__(self, *exc):
        del get_memory_hooks()[self.name]
    def malloc_postprocess(self, **kw): pass
    def free_preprocess(self, **kw): pass
EOF
cat >"$W/cupy_prog.py" <<'EOF'
import threading
import cupy

def keep(kept):
    kept.append(cupy.empty(4 << 20))

kept = []
for _ in range(3):
    keep(kept)
for _ in range(10):
    x = cupy.empty(1 << 20)
    del x
t = threading.Thread(target=keep, args=(kept,))
t.start()
t.join()
EOF
"$GMEM" run -- python3 "$W/cupy_prog.py" >"$W/cupy.out" 2>"$W/cupy.err"
cat "$W/cupy.err"
P=$(pid_of "$W/cupy.err"); [ -n "$P" ] && PIDS+=("$P")
has "$W/cupy.err" "gmem: CuPy: memory pool kept; each array traced with its line" "CuPy: the one line"
has "$W/cupy.err" "gmem: held all run: 16.0 MiB in 4 allocations from 2 sites, not leaks" "CuPy: 3 arrays + 1 from a thread (its own stack)"
if [ -n "$P" ]; then
  "$GMEM" leaks --all "$P" >"$W/cupy_leaks.txt"
  has "$W/cupy_leaks.txt" "#0  keep at cupy_prog.py:5" "CuPy: the array's line first"
fi

echo "== pytest --gmem: a tensor kept in a segment the cache already had fails gmem_no_leaks"
PYT=
for p in python3 /usr/bin/python3; do
  command -v "$p" >/dev/null && "$p" -m pytest --version >/dev/null 2>&1 && { PYT=$p; break; }
done
if [ -n "$PYT" ]; then
  cat >"$W/test_kept.py" <<'EOF'
import pytest
import torch

kept = []


def test_warms_the_cache():
    torch.empty(1 << 20)


@pytest.mark.gmem_no_leaks
def test_keeps_a_tensor():
    kept.append(torch.empty(1 << 20))
EOF
  (cd "$W" && PYTHONPATH=$SRC/../../python:$PYTHONPATH GMEM_BUILD=$B PYTHONDONTWRITEBYTECODE=1 \
    GMEM_TRACE_KEEP=none "$PYT" -m pytest -p gmem.pytest_plugin -p no:cacheprovider -q --gmem test_kept.py) >"$W/pytest.out" 2>&1
  cat "$W/pytest.out"
  has "$W/pytest.out" "FAILED test_kept.py::test_keeps_a_tensor" "pytest: the kept tensor fails the test"
  has "$W/pytest.out" "1.00 MiB of tensors allocated by the test are still live after it" "pytest: says what"
  has "$W/pytest.out" "test_keeps_a_tensor at test_kept.py:13 (python)" "pytest: names the line"
  has "$W/pytest.out" "1 failed, 1 passed" "pytest: the other test passes"
else
  echo "skipped: no python3 with pytest"
fi

echo "== the attach entry refuses what it cannot trust, by name"
GMEM_TRACE_KEEP=none LD_PRELOAD=$B/lib/libgmem.so python3 - "$B/tests/tools/fw/libc10_cuda.so" >"$W/attach.out" 2>"$W/attach.err" <<'EOF'
import ctypes, sys
c10 = ctypes.CDLL(sys.argv[1])
gm = ctypes.CDLL(None)
attach = gm.gmem_observe_torch_attach
attach.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
var = ctypes.addressof(ctypes.c_void_p.in_dll(c10, "_ZN3c104cuda20CUDACachingAllocator9allocatorE"))
def layout(**change):
    f = dict(struct_bytes=56, version=1, slot=44, entry=136, action=0, device=4, addr=8,
             stream=32, size=40, alloc=0, free=1, action_max=8, flags=0, reserved=0)
    f.update(change)
    kept.append((ctypes.c_int32 * 14)(*f.values()))  # alive while attach reads it
    return kept[-1]
kept = []
print("before init", attach(var, ctypes.addressof(layout()), b"PyTorch 2.11", 0))
c10.fake_c10_cuda_init()
print("short", attach(var, ctypes.addressof(layout(struct_bytes=48)), b"PyTorch 2.11", 0))
print("outside", attach(var, ctypes.addressof(layout(size=132)), b"PyTorch 2.11", 0))
print("null slot", attach(var, ctypes.addressof(layout(slot=45)), b"PyTorch 2.11", 0))
print("good", attach(var, ctypes.addressof(layout()), b"PyTorch 2.11", 0))
print("again", attach(var, ctypes.addressof(layout()), b"PyTorch 2.11", 0))
EOF
cat "$W/attach.out" "$W/attach.err"
for want in "before init 2" "short 1" "outside 1" "null slot 3" "good 0" "again 4"; do
  has "$W/attach.out" "$want" "attach: $want"
done
has "$W/attach.err" "gmem: PyTorch 2.11: per-tensor observation not available (no allocator yet)" "attach before CUDA's initialization"
has "$W/attach.err" "(a layout descriptor of another size)" "attach: a short descriptor"
has "$W/attach.err" "(a field outside the TraceEntry)" "attach: a field outside"
has "$W/attach.err" "(the allocator is not PyTorch's caching allocator)" "attach: a slot that is not the library's code"

echo "== a framework that is not installed: nothing said, nothing set"
GMEM_TRACE_KEEP=none PYTHONPATH=$W/user LD_PRELOAD=$B/lib/libgmem.so python3 -c '
import os
for m in ("jax", "torch", "cupy"):
    try:
        __import__(m)
    except ImportError:
        pass
print("xla", os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR"))' >"$W/absent.out" 2>"$W/absent.err"
has "$W/absent.out" "xla None" "absent JAX: nothing set"
hasnt "$W/absent.err" "gmem:" "absent frameworks: nothing said"

echo "== a program without torch imports nothing of it"
GMEM_TRACE_KEEP=none LD_PRELOAD=$B/lib/libgmem.so python3 -c 'import sys; print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "cupy", "ctypes")))' >"$W/none.out" 2>&1
has "$W/none.out" "[]" "no torch, cupy or ctypes imported by the bootstrap"

[ $failures -eq 0 ] && echo "observe_e2e_test: all passed"
exit $((failures > 0))
