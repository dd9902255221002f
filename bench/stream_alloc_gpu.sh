#!/usr/bin/env bash
# Allocation with kernels in flight (bench/stream_alloc_bench.cu), every allocator in one run,
# side by side with the launch floor:
#   bench/stream_alloc_gpu.sh [OUT_DIR]      (default build/bench/stream; needs a GPU)
# Environment: BUILD (build; a bundle's .device/build with GMEM_PREBUILT=1), GMEM_LIB ($BUILD/lib/libgmem.so),
# GMEM_LIB_B (unset; another libgmem.so: one more row, gmem-sync-b, to compare two builds in the
# same rounds), THREADS (1,4,16), SECONDS_PER (1.0), SIZES (256,4M), LIVE (8), INFLIGHT (0:
# unbounded; N: each thread waits for the op N earlier before launching, as a program that
# reads its results does), ROWS (all: floor cudaMallocAsync cub cudaMalloc gmem-async
# gmem-async-traced gmem-sync floor-gmem; floor-gmem is the floor under the shim, trace off:
# what gmem costs the launches themselves), ROUNDS (1). Writes OUT_DIR/stream.jsonl (every
# round's rows, each with its "round"), OUT_DIR/commands.txt and OUT_DIR/gmem-sync-verbose.txt (the pool's
# GMEM_VERBOSE=1 counters after a gmem-sync run at the last thread count), and prints, per
# thread count, each row's mean/p99 per op, its time above the floor and gmem's share of
# cudaMallocAsync's time above the floor. With ROUNDS > 1 every round runs all rows, in reverse order every other round
# (paired rounds), and the shares are taken within each round and given as their median
# (min-max): the targets are <= 0.10 through cudaMalloc (gmem-sync) and the floor's own time
# through cudaMallocAsync (gmem-async), at 16 threads.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${1:-$BUILD/bench/stream}
GMEM_LIB=${GMEM_LIB:-$BUILD/lib/libgmem.so}
THREADS=${THREADS:-1,4,16}
SECONDS_PER=${SECONDS_PER:-1.0}
SIZES=${SIZES:-256,4M}
LIVE=${LIVE:-8}
INFLIGHT=${INFLIGHT:-0}
B=$BUILD/bench/stream_alloc_bench
# A scripts/gpu-bundle.sh bundle (BUILD=.device/build GMEM_PREBUILT=1) has it prebuilt here.
[ ! -x "$B" ] && [ -x "$BUILD/tests/gpu/stream_alloc_bench" ] && B=$BUILD/tests/gpu/stream_alloc_bench
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "stream_alloc_gpu: skipped: no NVIDIA GPU found"
  exit 0
fi
if [ "${GMEM_PREBUILT:-0}" != 1 ]; then
  make --no-print-directory "$B" "$GMEM_LIB" >/dev/null || { echo "stream_alloc_gpu: build failed"; exit 1; }
fi
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
    --random-sizes "$SIZES" --live "$LIVE" --inflight "$INFLIGHT" --json "$OUT/stream.jsonl")
  echo "${cmd[*]}" >>"$OUT/commands.txt"
  "${cmd[@]}" || { echo "stream_alloc_gpu: $label failed (exit $?)"; rc=1; }
}
ROUNDS=${ROUNDS:-1}
row() { # N: the Nth row
  case $1 in
  1) run floor -- --method floor ;;
  2) run cudaMallocAsync -- --method cudaMallocAsync ;;
  3) run cub -- --method cub ;;
  4) run cudaMalloc -- --method cudaMalloc ;;
  5) run gmem-async LD_PRELOAD="$GMEM_LIB" GMEM_TRACE=0 -- --method cudaMallocAsync ;;
  6) run gmem-async-traced LD_PRELOAD="$GMEM_LIB" -- --method cudaMallocAsync ;;
  7) run gmem-sync LD_PRELOAD="$GMEM_LIB" GMEM_TRACE=0 -- --method cudaMalloc ;;
  8) run gmem-sync-b LD_PRELOAD="$GMEM_LIB_B" GMEM_TRACE=0 -- --method cudaMalloc ;;
  9) run floor-gmem LD_PRELOAD="$GMEM_LIB" GMEM_TRACE=0 -- --method floor ;;
  esac
}
names=(floor cudaMallocAsync cub cudaMalloc gmem-async gmem-async-traced gmem-sync gmem-sync-b floor-gmem)
all_rows="1 2 3 4 5 6 7${GMEM_LIB_B:+ 8} 9"
if [ -n "${ROWS:-}" ]; then
  all_rows=""
  for want in $ROWS; do
    [ "$want" = gmem-sync-b ] && [ -z "${GMEM_LIB_B:-}" ] &&
      { echo "stream_alloc_gpu: ROWS names gmem-sync-b but GMEM_LIB_B is not set"; exit 2; }
    for i in "${!names[@]}"; do [ "${names[$i]}" = "$want" ] && all_rows+="$((i + 1)) "; done
  done
  [ -n "$all_rows" ] || { echo "stream_alloc_gpu: ROWS='$ROWS' names no row (${names[*]})"; exit 2; }
fi
for round in $(seq "$ROUNDS"); do
  rows=$all_rows
  [ $((round % 2)) = 0 ] && rows=$(tr ' ' '\n' <<<"$rows" | tac | tr '\n' ' ')
  before=$(wc -l <"$OUT/stream.jsonl")
  for n in $rows; do row "$n"; done
  # tag this round's lines
  python3 - "$OUT/stream.jsonl" "$before" "$round" <<'PY'
import json, sys
path, before, rnd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = open(path).read().splitlines()
out = lines[:before] + [json.dumps(dict(json.loads(l), round=rnd)) for l in lines[before:] if l.strip()]
open(path, "w").write("\n".join(out) + "\n")
PY
done
# Where gmem's time goes through cudaMalloc at the most threads: the pool's counters (fences,
# barriers and their host time, lock waits) of one more gmem-sync run, in gmem-sync-verbose.txt.
env LD_PRELOAD="$GMEM_LIB" GMEM_TRACE=0 GMEM_VERBOSE=1 "$B" --method cudaMalloc \
  --label gmem-sync-verbose --threads "${THREADS##*,}" --seconds "$SECONDS_PER" \
  --random-sizes "$SIZES" --live "$LIVE" --inflight "$INFLIGHT" >"$OUT/gmem-sync-verbose.txt" 2>&1 ||
  echo "stream_alloc_gpu: the verbose gmem-sync run failed (see $OUT/gmem-sync-verbose.txt)"
python3 - "$OUT/stream.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["threads"], {})[r["label"]] = r  # the last round's, for the table
shares = {}  # (threads, label) -> [share per round]
per_round = {}
for r in rows:
    per_round.setdefault((r.get("round", 1), r["threads"]), {})[r["label"]] = r
for (rnd, t), cells in per_round.items():
    floor = cells.get("floor", {}).get("mean_ns")
    asyn = cells.get("cudaMallocAsync", {}).get("mean_ns")
    if floor is None or asyn is None or asyn <= floor:
        continue
    for label in ("gmem-sync", "gmem-sync-b", "gmem-async", "gmem-async-traced", "floor-gmem"):
        if label in cells:
            shares.setdefault((t, label), []).append((cells[label]["mean_ns"] - floor) / (asyn - floor))
for t in sorted(by):
    cells = by[t]
    floor = cells.get("floor", {}).get("mean_ns")
    asyn = cells.get("cudaMallocAsync", {}).get("mean_ns")
    print(f"\n{t} threads            mean ns/op     p99 ns   above floor   ops/ms  drain ms   vs cudaMallocAsync above floor")
    for label, r in cells.items():
        above = r["mean_ns"] - floor if floor is not None else float("nan")
        share = ""
        if floor is not None and asyn is not None and asyn > floor and label != "cudaMallocAsync":
            share = f"{above / (asyn - floor):.2f}x"
        print(f"  {label:<20} {r['mean_ns']:>10.0f} {r['p99_ns']:>10.0f} {above:>12.0f} {r['ops_per_ms']:>8.1f} {r.get('drain_ms', 0):>9.1f}   {share}")
if shares:
    print("\nshare of cudaMallocAsync's time above the floor, per round: median (min-max), rounds")
    for (t, label), v in sorted(shares.items()):
        print(f"  {t:2d} threads {label:<20} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}), {len(v)}")
PY
exit $rc
