#!/usr/bin/env bash
# Allocation with kernels in flight (bench/stream_alloc_bench.cu), every allocator in one run,
# side by side with the launch floor:
#   bench/stream_alloc_gpu.sh [OUT_DIR]      (default build/bench/stream; needs a GPU)
# Environment: BUILD (build), GMEM_LIB ($BUILD/lib/libgmem.so), THREADS (1,4,16), SECONDS_PER
# (1.0), SIZES (256,4M), LIVE (8). Writes OUT_DIR/stream.jsonl and OUT_DIR/commands.txt and
# prints, per thread count, each row's mean/p99 per op, its time above the floor and gmem's
# share of cudaMallocAsync's time above the floor (the issue's target: <= 0.25).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${1:-$BUILD/bench/stream}
GMEM_LIB=${GMEM_LIB:-$BUILD/lib/libgmem.so}
THREADS=${THREADS:-1,4,16}
SECONDS_PER=${SECONDS_PER:-1.0}
SIZES=${SIZES:-256,4M}
LIVE=${LIVE:-8}
B=$BUILD/bench/stream_alloc_bench
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "stream_alloc_gpu: skipped: no NVIDIA GPU found"
  exit 0
fi
make --no-print-directory "$B" "$GMEM_LIB" >/dev/null || { echo "stream_alloc_gpu: build failed"; exit 1; }
mkdir -p "$OUT"
: >"$OUT/stream.jsonl"
: >"$OUT/commands.txt"
rc=0
run() { # run LABEL [VAR=value...] -- ARGS...
  local label=$1 envs=()
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local cmd=(env "${envs[@]}" "$B" "$@" --label "$label" --threads "$THREADS" --seconds "$SECONDS_PER"
    --random-sizes "$SIZES" --live "$LIVE" --json "$OUT/stream.jsonl")
  echo "${cmd[*]}" >>"$OUT/commands.txt"
  "${cmd[@]}" || { echo "stream_alloc_gpu: $label failed (exit $?)"; rc=1; }
}
run floor -- --method floor
run cudaMallocAsync -- --method cudaMallocAsync
run cub -- --method cub
run cudaMalloc -- --method cudaMalloc
run gmem-async LD_PRELOAD="$GMEM_LIB" GMEM_TRACE=0 -- --method cudaMallocAsync
run gmem-async-traced LD_PRELOAD="$GMEM_LIB" -- --method cudaMallocAsync
run gmem-sync LD_PRELOAD="$GMEM_LIB" GMEM_TRACE=0 -- --method cudaMalloc
python3 - "$OUT/stream.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["threads"], {})[r["label"]] = r
for t in sorted(by):
    cells = by[t]
    floor = cells.get("floor", {}).get("mean_ns")
    asyn = cells.get("cudaMallocAsync", {}).get("mean_ns")
    print(f"\n{t} threads            mean ns/op     p99 ns   above floor   ops/ms   vs cudaMallocAsync above floor")
    for label, r in cells.items():
        above = r["mean_ns"] - floor if floor is not None else float("nan")
        share = ""
        if floor is not None and asyn is not None and asyn > floor and label != "cudaMallocAsync":
            share = f"{above / (asyn - floor):.2f}x"
        print(f"  {label:<20} {r['mean_ns']:>10.0f} {r['p99_ns']:>10.0f} {above:>12.0f} {r['ops_per_ms']:>8.1f}   {share}")
PY
exit $rc
