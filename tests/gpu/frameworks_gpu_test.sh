#!/usr/bin/env bash
# PyTorch, JAX and CuPy under `gmem run` with no variable set, each skipped when not
# installed:
# - a loop that frees what it allocates exits with no LEAKS line and `gmem leaks` exits 0, under
#   the default (PyTorch's and CuPy's caches kept and observed per tensor, JAX served by gmem's
#   pool) and with --frameworks pool;
# - under the default, one line says PyTorch's allocator is observed, and the exit summary
#   reports its cache as reserved memory instead of counting it;
# - the same program keeping arrays from one line (KEEP) reports exactly those, named by that
#   line as #0 (the frameworks' own Python frames folded), while it runs and at exit, under the
#   default and with --frameworks pool;
# - torch.cuda.graph and torch.compile(mode="reduce-overhead") run under the default, observed;
# - where a compiler and PyTorch's headers are there, scripts/torch_layout.cpp derives the
#   layout row of the PyTorch installed and it must equal the bootstrap's row.
# Exit 0 pass, 1 fail, 77 when a framework (or the compiler and PyTorch's headers for the layout
# row) is not here and all that ran passed; the last line says what was skipped.
source "$(dirname "$0")/python_lib.sh"
traced_runs
export GMEM_TRACE=1 PYTHONUNBUFFERED=1
unset GMEM_FRAMEWORKS PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF \
  XLA_PYTHON_CLIENT_ALLOCATOR XLA_PYTHON_CLIENT_PREALLOCATE
PROG=$here/frameworks_check.py
KEEP=$(grep -n "# KEEP" "$PROG" | cut -d: -f1 | tr '\n' ' ')
ran=0

# clean NAME "FW [ARGS]" [gmem run args...]: the loop frees everything: no LEAKS, gmem leaks
# exits 0.
clean() {
  local name=$1 fw=$2 pid
  shift 2
  # shellcheck disable=SC2086 # FW carries the program's arguments
  "$GMEM" run "$@" -- "$PY" "$PROG" $fw >"$W/$name.out" 2>"$W/$name.err" ||
    fail "$name: the program failed: $(tail -5 "$W/$name.err")"
  cat "$W/$name.err"
  grep -q "LEAKS" "$W/$name.err" && fail "$name: the exit summary reports leaks"
  pid=$(pid_of "$W/$name.err")
  [ -n "$pid" ] || { fail "$name: no pid in the summary"; return; }
  PIDS+=("$pid")
  "$GMEM" leaks "$pid" >"$W/$name.leaks" || fail "$name: gmem leaks exits $?: $(cat "$W/$name.leaks")"
  echo "ok: $name: no leaks reported"
}

# kept NAME "FW [ARGS]" COUNT BYTES [gmem run args...]: keeps COUNT arrays from the KEEP line:
# gmem leaks while it runs and at exit reports exactly them, #0 the KEEP line.
kept() {
  local name=$1 fw=$2 count=$3 bytes=$4 runner pid
  shift 4
  rm -f "$W/in" && mkfifo "$W/in"
  # shellcheck disable=SC2086 # FW carries the program's arguments
  "$GMEM" run "$@" -- "$PY" "$PROG" $fw --keep --wait <"$W/in" >"$W/$name.out" 2>"$W/$name.err" &
  runner=$!
  exec 3>"$W/in"
  for _ in $(seq 1200); do grep -q ready "$W/$name.out" 2>/dev/null && break; sleep 0.1; done
  pid=$(pgrep -f "frameworks_check.py $fw --keep --wait" -P "$runner" | head -1)
  "$GMEM" leaks "${pid:-0}" >"$W/$name.live"
  cat "$W/$name.live"
  for when in live exit; do
    if [ $when = exit ]; then
      exec 3>&-
      wait "$runner" || fail "$name: the program failed: $(tail -5 "$W/$name.err")"
      cat "$W/$name.err"
      "$GMEM" leaks "${pid:-0}" >"$W/$name.exit"
      PIDS+=("${pid:-0}")
    fi
    sed -n '/^#1 /,/^$/p' "$W/$name.$when" >"$W/$name.first"
    grep -q "$bytes in $count allocations" "$W/$name.first" ||
      fail "$name ($when): #1 is not the $count kept arrays ($bytes)"
    grep -Eq "#0 .* at frameworks_check.py:($(echo $KEEP | tr ' ' '|')) \(python\)" "$W/$name.first" ||
      fail "$name ($when): #0 of #1 is not the KEEP line of frameworks_check.py"
    grep -q "^#2 " "$W/$name.$when" && fail "$name ($when): more than one site reported"
  done
  grep -q "LEAKS: $bytes in $count allocations from 1 call sites" "$W/$name.err" ||
    fail "$name: the exit summary does not report exactly the kept arrays"
  echo "ok: $name: exactly the kept arrays, by their line"
}

if "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  ran=$((ran + 1))
  echo "== PyTorch"
  clean torch_observe torch
  grep -Eq "^gmem: PyTorch [0-9.]+: caching allocator kept \(CUDA graphs work\); each tensor traced with its line$" \
    "$W/torch_observe.err" || fail "torch_observe: no line saying PyTorch's allocator is observed"
  grep -q "PyTorch's caching allocator holds .* memory it keeps for reuse, not leaks" "$W/torch_observe.err" ||
    fail "torch_observe: the exit summary does not report PyTorch's cache as reserved memory"
  kept torch_observe_keep torch 5 "20.0 MiB"
  grep -q "tensor" "$W/torch_observe_keep.exit" || fail "torch_observe_keep: the kept arrays are not tensors"
  clean torch_pool torch --frameworks pool
  kept torch_pool_keep torch 5 "20.0 MiB" --frameworks pool
  "$GMEM" run -- "$PY" "$PROG" torch --graphs >"$W/graphs.out" 2>"$W/graphs.err" &&
    grep -q "graphs:" "$W/graphs.out" && echo "ok: CUDA graphs and reduce-overhead under the default" ||
    fail "torch --graphs under the default: $(tail -5 "$W/graphs.err")"
  grep -q "per-tensor observation stopped" "$W/graphs.err" && fail "torch --graphs: observation stopped"
  PIDS+=("$(pid_of "$W/graphs.err")")
  # The layout row against the installed PyTorch's headers, where they can be compiled.
  tinc=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
  if command -v g++ >/dev/null && [ -f "$tinc/c10/cuda/CUDACachingAllocator.h" ]; then
    if g++ -std=c++17 -Wno-invalid-offsetof -D_GLIBCXX_USE_CXX11_ABI=1 -I"$tinc" \
      -I"$tinc/torch/csrc/api/include" -I"${CUDA_HOME:-/usr/local/cuda}/include" \
      "$root/scripts/torch_layout.cpp" -o "$W/torch_layout" 2>"$W/layout.err"; then
      derived=$("$W/torch_layout" | tr -d ' \n')
      table=$(sed -n '/^TORCH_LAYOUTS = {/,/^}/p' "$build/lib/gmem/bootstrap/sitecustomize.py" | tr -d ' \n')
      case "$table" in *"$derived"*) echo "ok: layout row: $derived" ;;
        *) fail "the installed PyTorch's layout $derived is not the bootstrap's row" ;; esac
    else
      fail "scripts/torch_layout.cpp does not compile against the installed PyTorch: $(head -3 "$W/layout.err")"
    fi
  else
    skip_part "the layout row (no g++ or no PyTorch headers in $tinc)"
  fi
else
  skip_part "PyTorch (not installed or no GPU)"
fi
if "$PY" -c "import jax; assert jax.devices('gpu')" 2>/dev/null; then
  ran=$((ran + 1))
  echo "== JAX"
  clean jax_observe jax
  grep -q "gmem: JAX: XLA's arena cannot be observed per array; set XLA_PYTHON_CLIENT_ALLOCATOR=platform" \
    "$W/jax_observe.err" || fail "jax_observe: no line saying gmem's pool serves JAX"
  kept jax_keep jax 4 "16.0 MiB"
  clean jax_pool jax --frameworks pool
  kept jax_pool_keep jax 4 "16.0 MiB" --frameworks pool
else
  skip_part "JAX (not installed or no GPU)"
fi
if "$PY" -c "import cupy; cupy.cuda.runtime.getDeviceCount()" 2>/dev/null; then
  ran=$((ran + 1))
  echo "== CuPy"
  clean cupy_pool_kept cupy
  grep -q "gmem: CuPy: memory pool kept; each array traced with its line" "$W/cupy_pool_kept.err" ||
    fail "cupy_pool_kept: no line saying CuPy's pool is observed"
  kept cupy_pool_keep cupy 5 "20.0 MiB"
  clean cupy_no_pool "cupy --no-pool"
  kept cupy_no_pool_keep "cupy --no-pool" 5 "20.0 MiB"
else
  skip_part "CuPy (not installed or no GPU)"
fi
[ $ran = 0 ] && { echo "skipped: none of torch, jax, cupy with a GPU"; exit 77; }
end_test frameworks_gpu_test
