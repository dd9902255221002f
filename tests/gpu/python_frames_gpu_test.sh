#!/usr/bin/env bash
# Python frames on the GPU: PyTorch (PYTORCH_NO_CUDA_MEMORY_CACHING=1) and CuPy (pool
# off) keep five 4 MiB arrays alive from one known line. While the program runs, `gmem leaks PID`
# names that line first; at exit no cuBLAS handle or workspace is reported as a leak (they are
# listed as suppressed). Then the cost of Python frames per allocation with torch imported, with
# the GIL held and released. Exit 0 pass, 1 fail, 77 when torch or cupy is not installed (the
# last line says which) and all that ran passed.
source "$(dirname "$0")/python_lib.sh"
GMEM=$build/bin/gmem
[ -x "$GMEM" ] || { echo "no $GMEM: run make first"; exit 1; }
export GMEM_TRACE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONUNBUFFERED=1
PROG=$here/python_frames_check.py
KEEP=$(grep -n "# KEEP" "$PROG" | cut -d: -f1)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
failures=0 ran=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

check_framework() { # torch|cupy
  local fw=$1 runner pid
  "$PY" -c "import $fw" 2>/dev/null || { skip_part "$fw is not installed"; return; }
  ran=$((ran + 1))
  echo "== $fw: gmem leaks PID while it runs"
  rm -f "$W/in" && mkfifo "$W/in"
  "$GMEM" run -- "$PY" "$PROG" "$fw" --wait <"$W/in" >"$W/$fw.out" 2>"$W/$fw.err" &
  runner=$!
  exec 3>"$W/in"
  for _ in $(seq 600); do grep -q ready "$W/$fw.out" 2>/dev/null && break; sleep 0.1; done
  pid=$(pgrep -f "python_frames_check.py $fw --wait" -P "$runner" | head -1)
  "$GMEM" leaks "${pid:-0}" >"$W/$fw.live.txt"
  cat "$W/$fw.live.txt"
  sed -n '/^#1 /,/^$/p' "$W/$fw.live.txt" >"$W/$fw.first.txt"
  grep -q "20.0 MiB in 5 allocations" "$W/$fw.first.txt" || fail "$fw: the largest site is not the five 4 MiB arrays"
  grep -q "keep_tensors at python_frames_check.py:$KEEP (python)" "$W/$fw.first.txt" ||
    fail "$fw: the largest site does not name python_frames_check.py:$KEEP"
  exec 3>&-
  wait "$runner" || fail "$fw: the program failed"
  cat "$W/$fw.err"
  echo "== $fw: at exit"
  "$GMEM" leaks "${pid:-0}" >"$W/$fw.exit.txt"
  cat "$W/$fw.exit.txt"
  # The absence checks below need the report of this process at exit and its run summary.
  [ -n "$pid" ] && grep -q "^gmem leaks: pid $pid " "$W/$fw.exit.txt" ||
    fail "$fw: no leak report of the exited process (pid '${pid:-}')"
  grep -q "exited with status" "$W/$fw.err" || fail "$fw: no run summary in its stderr"
  # Sites above the Suppressed: block must not be library handles or workspaces.
  sed '/^Suppressed:/,$d' "$W/$fw.exit.txt" | grep -Eiq "cublas|cudnn|cufft|nccl" &&
    fail "$fw: a CUDA library allocation is reported as a leak"
  grep -Eq "LEAKS: .*cublas|cublas.*LEAKS" "$W/$fw.err" && fail "$fw: run summary counts cuBLAS"
  "$GMEM" clean --force "${pid:-0}" >/dev/null 2>&1
}

check_framework torch
check_framework cupy
[ $ran = 0 ] && { echo "skipped: neither torch nor cupy is installed"; exit 77; }

if "$PY" -c "import torch" 2>/dev/null; then
  echo "== cost of Python frames per cuMemAlloc+cuMemFree pair (torch imported; best of 3 runs)"
  for mode in "" --released; do # GIL held (ctypes.PyDLL), GIL released (ctypes.CDLL, as torch)
    for cfg in "GMEM_PYTHON_DEPTH=0" "GMEM_PYTHON_DEPTH=16"; do
      best=
      for _ in 1 2 3; do
        v=$(env $cfg GMEM_TRACE_KEEP=none LD_PRELOAD="$shim" "$PY" "$root/bench/python_frames_bench.py" --torch $mode 50000 20 | cut -d' ' -f1)
        [ -z "$best" ] || [ "$v" -lt "$best" ] && best=$v
      done
      echo "$cfg ${mode:-(GIL held)}: $best ns per pair (Python stack 20 deep)"
    done
  done
fi
end_test python_frames_gpu_test
