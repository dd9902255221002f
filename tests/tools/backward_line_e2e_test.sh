#!/usr/bin/env bash
# Tensors allocated by PyTorch's autograd engine threads carry the Python line that called
# backward(), end to end without a GPU: a real python3 under `gmem run` imports the stand-in
# `torch` (tests/tools/fake_torch) whose torch.autograd.graph._engine_run_backward calls the
# stand-in engine of libc10_cuda.so (tests/tools/fake_framework_libs.cpp): a native thread named
# pt_autograd_0 allocates the gradients through the caching allocator's trace tracker (as real
# PyTorch does) while the calling thread waits. Checks: Tensor.backward() and
# torch.autograd.grad() (which reach the engine by the name torch.autograd imported) name the
# calling line, marked "[via backward()]", in `gmem leaks` text and JSON, the HTML report and
# both exports; the same engine thread allocating while no Python thread waits keeps its native
# stack and its note; the driver hooks' path (PYTORCH_NO_CUDA_MEMORY_CACHING=1) gets the line too;
# GMEM_FRAMEWORKS=off wraps nothing.
set -u
source "$(dirname "$0")/fake_torch_env.sh"
export PYTHONDONTWRITEBYTECODE=1
source "$(dirname "$0")/../traced_runs.sh"
has() { grep -qF -- "$2" "$1" || fail "$3: no '$2' in $1: $(cat "$1")"; }
hasnt() { grep -qF -- "$2" "$1" && fail "$3: '$2' in $1: $(cat "$1")"; }

mkdir -p "$W/site/lib/site-packages"
cp -r "$SRC/fake_torch/torch" "$W/site/lib/site-packages/"
mkdir -p "$W/site/lib/site-packages/torch/lib"
cp "$B/tests/tools/fw/libc10_cuda.so" "$W/site/lib/site-packages/torch/lib/"
export PYTHONPATH=$W/site/lib/site-packages

# Three backward passes from train()'s loss.backward() (2 x 1 MiB gradients each), one
# torch.autograd.grad() from probe() (2 x 512 KiB, with RAW one more from the driver), and the
# engine thread allocating 2 x 256 KiB while no Python thread waits (outside_backward()).
cat >"$W/prog.py" <<'EOF'
import ctypes, os
import torch

def train(kept):
    loss = torch.empty(1 << 20)
    kept.append(loss)
    loss.backward()  # BACKWARD

def probe(kept):
    y = torch.empty(512 << 10)
    kept.append(y)
    kept.extend(torch.autograd.grad(y, raw=bool(os.environ.get("RAW"))))  # GRAD

def outside_backward(kept):
    out = (ctypes.c_uint64 * 3)()
    torch._lib.fake_c10_cuda_run_backward(256 << 10, 2, 0, out)
    kept.extend(out[:2])

kept = []
for _ in range(3):
    train(kept)
probe(kept)
outside_backward(kept)
EOF
BACKWARD=$(grep -n "# BACKWARD" "$W/prog.py" | cut -d: -f1)
GRAD=$(grep -n "# GRAD" "$W/prog.py" | cut -d: -f1)

echo "== gmem run -- python3 prog.py"
"$GMEM" run -- python3 "$W/prog.py" >"$W/run.out" 2>"$W/run.err"
rc=$?
cat "$W/run.err"
[ $rc -eq 0 ] || fail "gmem run exited $rc"
PID=$(pid_of "$W/run.err")
[ -n "$PID" ] && PIDS+=("$PID")
has "$W/run.err" "gmem: PyTorch 2.11: caching allocator kept" "observed"
hasnt "$W/run.err" "backward() lines not attributed" "the wrapper"
if [ -n "$PID" ]; then
  "$GMEM" leaks --all "$PID" >"$W/leaks.txt"
  cat "$W/leaks.txt"
  sed -n '/^#1 /,/^$/p' "$W/leaks.txt" >"$W/site1.txt"
  has "$W/site1.txt" "#1 6.00 MiB in 6 allocations" "the gradients of three backward passes: one site"
  has "$W/site1.txt" "#0  train [via backward()] at prog.py:$BACKWARD (python)" "backward(): its line, marked"
  has "$W/site1.txt" "#1  <module> at prog.py:" "backward(): its caller"
  has "$W/site1.txt" "[via backward()]: allocated on PyTorch's autograd engine thread while this line waited in backward()" "what the mark means"
  has "$W/leaks.txt" "#0  probe [via backward()] at prog.py:$GRAD (python)" "grad(): its line, marked"
  has "$W/leaks.txt" "no Python frames: the allocating thread was not running Python code" "no backward waiting: no line"
  [ "$(grep -c "via backward()\] at" "$W/leaks.txt")" -eq 2 ] || fail "two marked sites"
  "$GMEM" leaks --all "$PID" --json >"$W/leaks.json"
  python3 - "$W/leaks.json" "$BACKWARD" <<'PY' || fail "gmem leaks --json"
import json, sys
d = json.load(open(sys.argv[1]))
line = int(sys.argv[2])
marked = [s for s in d["sites"] + d["apart"] if s["frames"] and s["frames"][0].get("via")]
assert len(marked) == 2, [s["frames"][:1] for s in d["sites"] + d["apart"]]
top = [s for s in marked if s["frames"][0]["line"] == line]
assert top and top[0]["frames"][0] == {"python": True, "function": "train", "file": top[0]["frames"][0]["file"],
                                      "line": line, "via": "backward()"}, top
assert top[0]["count"] == 6 and top[0]["kinds"] == ["tensor"], top[0]
print("leaks --json: the marked frames")
PY
  "$GMEM" report "$PID" -o "$W/report.html" 2>/dev/null || fail "gmem report"
  has "$W/report.html" "train [via backward()]" "report: the mark"
  "$GMEM" export "$PID" --format chrome -o "$W/trace.json" 2>/dev/null || fail "export chrome"
  has "$W/trace.json" "train [via backward()] (prog.py:$BACKWARD)" "chrome export: the mark"
  "$GMEM" export "$PID" --format pytorch -o "$W/snap.pickle" 2>"$W/export.err" || fail "export pytorch: $(cat "$W/export.err")"
  python3 - "$W/snap.pickle" "$BACKWARD" <<'PY' || fail "export --format pytorch: the mark"
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
names = {(f["name"], f["line"]) for t in d["device_traces"] for e in t for f in e.get("frames", [])}
assert ("train [via backward()]", int(sys.argv[2])) in names, sorted(names)[:20]
print("export pytorch: the mark")
PY
fi

echo "== the driver hooks' path: PYTORCH_NO_CUDA_MEMORY_CACHING=1"
RAW=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$GMEM" run -- python3 "$W/prog.py" >/dev/null 2>"$W/raw.err"
P=$(pid_of "$W/raw.err"); [ -n "$P" ] && PIDS+=("$P")
if [ -n "$P" ]; then
  "$GMEM" leaks --all "$P" >"$W/raw.txt"
  has "$W/raw.txt" "#0  probe [via backward()] at prog.py:$GRAD (python)" "cudaMalloc on the engine thread: its line, marked"
fi

echo "== GMEM_FRAMEWORKS=off: nothing wrapped"
GMEM_FRAMEWORKS=off RAW=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$GMEM" run -- python3 "$W/prog.py" >/dev/null 2>"$W/off.err"
P=$(pid_of "$W/off.err"); [ -n "$P" ] && PIDS+=("$P")
if [ -n "$P" ]; then
  "$GMEM" leaks --all "$P" >"$W/off.txt"
  hasnt "$W/off.txt" "via backward()" "off"
  has "$W/off.txt" "no Python frames: the allocating thread was not running Python code" "off: the engine thread's own stack"
fi

[ $failures -eq 0 ] && echo "backward_line_e2e_test: all passed"
exit $((failures > 0))
