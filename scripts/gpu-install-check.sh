#!/usr/bin/env bash
# The release check on a GPU machine, e.g. Ubuntu 24.04 with an NVIDIA driver and
# PyTorch, no libunwind/libdw, no compilers, no network. Needs what `make dist wheel` wrote
# here (DIST, default build/dist): the tarball, the wheel and gpu-check/mixed_alloc (built
# with nvcc by make dist; else .device/build/tests/gpu/mixed_alloc from scripts/gpu-bundle.sh).
#   1. the tarball, extracted to a temporary directory: gmem --help; its libraries resolve
#      inside it; `gmem run` on a CUDA program (mixed_alloc: nvcc's static runtime, checked
#      results) and on a PyTorch script with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (results
#      checked against the CPU; the gmem package from the tarball answers from the shim);
#      gmem leaks / stats / frag on the PyTorch run;
#   2. the wheel, installed with `pip install --no-index` into a venv made with
#      --system-site-packages (for PyTorch): the same PyTorch script under the wheel's `gmem`,
#      and mixed_alloc.
# Logs and a summary go to $OUT (default build/gpu-install-check). Exit 0 when every check
# passed, 77 when there is no GPU, 1 otherwise.
# Run from the repository root:  scripts/gpu-install-check.sh [DIST]
# Environment: OUT, PYTHON (a python3 that has torch; default: python3, then /usr/bin/python3).
set -u
cd "$(dirname "$0")/.."
DIST=${1:-build/dist}
OUT=${OUT:-build/gpu-install-check}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
W=$(mktemp -d /tmp/gmem-install-check.XXXXXX)
PIDS=()
GMEM_FOR_CLEAN=
cleanup() {
  [ -n "$GMEM_FOR_CLEAN" ] && for p in "${PIDS[@]}"; do "$GMEM_FOR_CLEAN" clean --force "$p" >/dev/null 2>&1; done
  rm -rf "$W"
}
trap cleanup EXIT
passes=0 fails=0
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
pass() { passes=$((passes + 1)); say "PASS $*"; }
fail() { fails=$((fails + 1)); say "FAIL $*"; }
pid_of() { sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$1" | tail -1; }
keep_pid() { [ -n "$1" ] && PIDS+=("$1"); }  # traces to clean at exit (never an empty pid)

say "== gpu-install-check $(date -u +%FT%TZ) on $(hostname)"
{
  grep PRETTY_NAME /etc/os-release
  ldd --version 2>&1 | head -1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "system libunwind: $(ldconfig -p | grep -c 'libunwind\.so\.8') copies, libdw: $(ldconfig -p | grep -c 'libdw\.so\.1') copies"
} 2>&1 | tee -a "$summary"
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  say "skipped: no GPU (nvidia-smi lists none)"
  exit 77
fi
tarball=$(ls "$DIST"/gmem-*-linux-x86_64.tar.gz 2>/dev/null | head -1)
wheel=$(ls "$DIST"/gmem-*-py3-none-manylinux_*_x86_64.whl 2>/dev/null | head -1)
[ -n "$tarball" ] || { fail "no tarball in $DIST (run make dist here first)"; exit 1; }
prog=
for p in "$DIST/gpu-check/mixed_alloc" .device/build/tests/gpu/mixed_alloc; do
  [ -x "$p" ] && { prog=$p; break; }
done
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for p in python3 /usr/bin/python3; do
    "$p" -c 'import torch' 2>/dev/null && { PY=$(command -v "$p"); break; }
  done
fi
say "tarball $tarball; wheel ${wheel:-none}; CUDA program ${prog:-none}; python with torch: ${PY:-none}"

# A small PyTorch job with the caching allocator off (every tensor a cudaMalloc): tensors of
# changing sizes, matmuls checked against the CPU, frees; and the gmem package's view.
cat >"$W/torch_check.py" <<'EOF'
import os
import sys

import torch

assert os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1"
torch.manual_seed(0)
worst = 0.0
kept = []
for step in range(60):
    n = 64 + (step * 37) % 448
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = (a.cuda() @ b.cuda()).cpu()
    worst = max(worst, (c - a @ b).abs().max().item() / max(1.0, (a @ b).abs().max().item()))
    if step % 20 == 0:
        kept.append(torch.empty(n * 1024, device="cuda"))
del kept
torch.cuda.synchronize()
print(f"torch_check: torch {torch.__version__} on {torch.cuda.get_device_name()}, "
      f"worst relative error {worst:.2e}")
try:
    import gmem
    print(f"torch_check: gmem package {gmem.__file__}, gmem.available()={gmem.available()}")
except ImportError as e:
    print(f"torch_check: no gmem package ({e})")
if worst > 1e-3:
    sys.exit("torch_check: FAIL results differ from the CPU")
print("torch_check: OK")
EOF

check_run() { # name log program-ok-pattern: checks a `gmem run` log: the program's own check
  local name=$1 log=$2 ok=$3  # passed, it exited 0, and the shim pooled its allocations
  if grep -q "$ok" "$log" && grep -q "^gmem: .* exited with status 0" "$log" &&
     grep -Eq "^gmem: [1-9][0-9]* allocations, cache hit rate" "$log"; then
    pass "$name"
  else
    fail "$name (log: $log)"
    tail -15 "$log" | sed 's/^/    | /'
  fi
  grep '^gmem: ' "$log" | sed 's/^/    /' | tee -a "$summary" >/dev/null
}

say "== 1. the tarball, extracted to $W/x"
mkdir -p "$W/x"
tar -C "$W/x" -xzf "$tarball" || fail "tar xzf $tarball"
T=$(ls -d "$W"/x/gmem-*-linux-x86_64)
G=$T/bin/gmem
GMEM_FOR_CLEAN=$G
"$G" --help >"$OUT/tar-help.log" 2>&1 && pass "tarball: gmem --help" || fail "tarball: gmem --help"
for f in "$G" "$T/lib/libgmem.so" "$T/lib/libgmem_client.so" "$T"/lib/gmem/*.so*; do
  ldd "$f" 2>&1 | sed "s|^|$(basename "$f"): |"
done >"$OUT/tar-ldd.log"
if grep -q "not found" "$OUT/tar-ldd.log"; then fail "tarball: unresolved libraries ($OUT/tar-ldd.log)"
else pass "tarball: every library resolves (ldd: $OUT/tar-ldd.log)"; fi
if command -v objdump >/dev/null; then
  scripts/check-glibc.sh "$T" >"$OUT/tar-glibc.log" 2>&1 && pass "tarball: glibc claim ($(tail -1 "$OUT/tar-glibc.log"))" ||
    fail "tarball: glibc claim ($OUT/tar-glibc.log)"
fi
if [ -n "$prog" ]; then
  cp "$prog" "$W/mixed_alloc"
  "$W/mixed_alloc" >"$OUT/mixed_alloc-plain.log" 2>&1
  grep -q "mixed_alloc: OK" "$OUT/mixed_alloc-plain.log" && pass "mixed_alloc without gmem" ||
    fail "mixed_alloc without gmem ($OUT/mixed_alloc-plain.log)"
  "$G" run -- "$W/mixed_alloc" >"$OUT/tar-mixed_alloc.log" 2>&1
  PID=$(pid_of "$OUT/tar-mixed_alloc.log")
  keep_pid "$PID"
  check_run "tarball: gmem run mixed_alloc" "$OUT/tar-mixed_alloc.log" "mixed_alloc: OK"
  [ -n "$PID" ] && "$G" stats "$PID" >"$OUT/tar-mixed_alloc-stats.log" 2>&1
else
  fail "no CUDA test program (make dist builds $DIST/gpu-check/mixed_alloc where nvcc is)"
fi
if [ -n "$PY" ]; then
  (cd "$W" && PYTHONPATH="$T/share/gmem/python${PYTHONPATH:+:$PYTHONPATH}" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
     "$G" run -- "$PY" "$W/torch_check.py") >"$OUT/tar-torch.log" 2>&1
  PID=$(pid_of "$OUT/tar-torch.log")
  keep_pid "$PID"
  check_run "tarball: gmem run PyTorch (PYTORCH_NO_CUDA_MEMORY_CACHING=1)" "$OUT/tar-torch.log" "torch_check: OK"
  grep -q "gmem.available()=True" "$OUT/tar-torch.log" &&
    pass "tarball: the Python package (share/gmem/python) answers from the shim" ||
    fail "tarball: gmem.available() is not True under gmem run ($OUT/tar-torch.log)"
  if [ -n "$PID" ]; then
    "$G" stats "$PID" >"$OUT/tar-torch-stats.log" 2>&1
    "$G" frag "$PID" >"$OUT/tar-torch-frag.log" 2>&1
    "$G" leaks "$PID" --top 5 >"$OUT/tar-torch-leaks.log" 2>&1
    rc=$?
    [ $rc -le 1 ] && pass "tarball: gmem stats/frag/leaks read the PyTorch trace (leaks exit $rc)" ||
      fail "tarball: gmem leaks exit $rc ($OUT/tar-torch-leaks.log)"
  fi
else
  fail "no python3 with torch (set PYTHON=)"
fi

say "== 2. the wheel, pip install --no-index into a venv (--system-site-packages)"
if [ -z "$wheel" ]; then
  fail "no wheel in $DIST (run make wheel here first)"
elif [ -z "$PY" ]; then
  fail "wheel: no python3 with torch to make the venv from"
else
  V=$W/venv
  {
    if "$PY" -m venv --system-site-packages "$V"; then
      "$V/bin/python" -m pip install --no-index "$wheel"
    else  # no ensurepip (Ubuntu without python3-venv): a venv without pip, the system's pip
      echo "venv with pip failed; trying --without-pip and the system pip (--python)"
      rm -rf "$V"
      "$PY" -m venv --system-site-packages --without-pip "$V" &&
        "$PY" -m pip --python "$V/bin/python" install --no-index "$wheel"
    fi
    # PY may itself be a venv's python (torch installed there, not in the system's
    # site-packages): the new venv sees PY's site-packages through a .pth file.
    if [ -x "$V/bin/python" ]; then
      site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      vsite=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      [ "$site" != "$vsite" ] && echo "$site" >"$vsite/gmem-check-torch.pth"
    fi
  } >"$OUT/wheel-install.log" 2>&1
  if [ -x "$V/bin/gmem" ]; then
    pass "wheel: pip install --no-index $(basename "$wheel")"
    "$V/bin/gmem" --help >/dev/null 2>&1 && pass "wheel: gmem --help from the venv" || fail "wheel: gmem --help"
    (cd "$W" && PATH="$V/bin:$PATH" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
       gmem run -- "$V/bin/python" "$W/torch_check.py") >"$OUT/wheel-torch.log" 2>&1
    keep_pid "$(pid_of "$OUT/wheel-torch.log")"
    check_run "wheel: gmem run PyTorch (PYTORCH_NO_CUDA_MEMORY_CACHING=1)" "$OUT/wheel-torch.log" "torch_check: OK"
    grep -q "gmem package $V/.*gmem.available()=True" "$OUT/wheel-torch.log" &&
      pass "wheel: the venv's gmem package answers from the wheel's shim" ||
      fail "wheel: gmem package not from the venv or not available ($OUT/wheel-torch.log)"
    if [ -n "$prog" ]; then
      "$V/bin/gmem" run -- "$W/mixed_alloc" >"$OUT/wheel-mixed_alloc.log" 2>&1
      keep_pid "$(pid_of "$OUT/wheel-mixed_alloc.log")"
      check_run "wheel: gmem run mixed_alloc" "$OUT/wheel-mixed_alloc.log" "mixed_alloc: OK"
    fi
  else
    fail "wheel: pip install --no-index ($OUT/wheel-install.log)"
    tail -5 "$OUT/wheel-install.log" | sed 's/^/    | /'
  fi
fi
say "gpu-install-check: $passes passed, $fails failed; logs in $OUT"
[ $fails -eq 0 ]
