#!/usr/bin/env bash
# DistributedDataParallel over NCCL on two GPUs under `gmem run` (skipped with fewer than two):
# torch.distributed.run starts one process per GPU, each traced on its own.
# - With nothing set (PyTorch's caching allocator observed) and with --frameworks pool (each
#   tensor served by gmem's pool), every rank gets the digest of a run without gmem (losses
#   and a record_stream'd side-stream result identical), and `gmem leaks` of every rank exits
#   0: NCCL's communicators and buffers, cuBLAS's workspaces and PyTorch's cache are not leaks.
# - A run keeping three 4 MiB tensors per rank from one line reports exactly those, named by
#   that line, for every rank.
source "$(dirname "$0")/python_lib.sh"
need_module torch
traced_runs
gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
[ "${gpus:-0}" -ge 2 ] || { echo "skipped: DDP needs two GPUs, this machine has ${gpus:-0}"; exit 77; }
export GMEM_TRACE=1 PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 OMP_NUM_THREADS=1
unset GMEM_FRAMEWORKS PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF
PROG=$here/ddp_check.py
KEEP=$(grep -n "# KEEP" "$PROG" | cut -d: -f1)
# The launcher's own trace (it is a Python process under the shim too).
launcher() { PIDS+=("$(pid_of "$1")"); }
ddp() { timeout 300 "$@" "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 "$PROG"; }

ddp env >"$W/native.out" 2>"$W/native.err" || { cat "$W/native.err"; echo "FAIL: DDP without gmem"; exit 1; }
# digests FILE: "R:DIGEST" per rank, sorted by rank.
digests() { sed -n 's/^rank \([0-9]\) pid [0-9]* digest \([0-9a-f]*\)$/\1:\2/p' "$1" | sort; }
want=$(digests "$W/native.out" | tr '\n' ' ')
[ "$(wc -w <<<"$want")" = 2 ] || { cat "$W/native.out"; echo "FAIL: not two ranks without gmem"; exit 1; }
echo "without gmem: $want"

for mode in observe pool; do
  before=$failures args=()
  [ $mode = pool ] && args=(--frameworks pool)
  ddp "$GMEM" run "${args[@]}" -- >"$W/$mode.out" 2>"$W/$mode.err" ||
    fail "$mode: DDP under gmem failed: $(tail -5 "$W/$mode.err")"
  launcher "$W/$mode.err"
  grep -E "^gmem: PyTorch" "$W/$mode.err" | sort -u
  got=$(digests "$W/$mode.out" | tr '\n' ' ')
  [ "$got" = "$want" ] || fail "$mode: the results differ from the run without gmem: $got"
  for pid in $(sed -n 's/^rank [0-9] pid \([0-9]*\) .*/\1/p' "$W/$mode.out"); do
    PIDS+=("$pid")
    "$GMEM" leaks "$pid" >"$W/$mode.$pid.leaks" ||
      fail "$mode: gmem leaks $pid exits $?: $(head -20 "$W/$mode.$pid.leaks")"
    grep -E "^Suppressed|^SUMMARY" "$W/$mode.$pid.leaks"
  done
  [ $failures = "$before" ] && echo "ok: $mode: identical results, no leaks reported on either rank"
done

# The same run keeping three tensors per rank: exactly those, by their line, on every rank.
DDP_CHECK_KEEP=1 ddp "$GMEM" run -- >"$W/keep.out" 2>"$W/keep.err" ||
  fail "keep: DDP under gmem failed: $(tail -5 "$W/keep.err")"
launcher "$W/keep.err"
n=0
for pid in $(sed -n 's/^rank [0-9] pid \([0-9]*\) .*/\1/p' "$W/keep.out"); do
  PIDS+=("$pid")
  n=$((n + 1))
  "$GMEM" leaks "$pid" >"$W/keep.$pid.leaks"
  sed -n '/^#1 /,/^$/p' "$W/keep.$pid.leaks" >"$W/first"
  cat "$W/first"
  grep -q "12.0 MiB in 3 allocations" "$W/first" || fail "keep: rank pid $pid: #1 is not the 3 kept tensors"
  grep -Eq "#0 .* at ddp_check.py:$KEEP \(python\)" "$W/first" ||
    fail "keep: rank pid $pid: #0 of #1 is not the KEEP line"
  grep -q "^#2 " "$W/keep.$pid.leaks" &&
    fail "keep: rank pid $pid: more than one site reported: $(sed -n '/^#2 /,$p' "$W/keep.$pid.leaks" | head -30)"
done
[ $n = 2 ] || fail "keep: $n ranks reported, not 2"
[ $failures = 0 ] && echo "ok: keep: exactly the kept tensors on both ranks, by their line"
[ $failures = 0 ]
