#!/usr/bin/env bash
# The tracing issue's measurements on a GPU machine, from a bundle (scripts/gpu-bundle.sh):
#   1. trace_bench: the recorder's own cost per alloc+free pair (mean, p99), no GPU needed;
#   2. trace_cost (C++, cudaMalloc pairs, 256 B - 4 MiB, 8 live): natively, and under gmem
#      with GMEM_TRACE=0, GMEM_STACK_DEPTH=0 and the defaults; the stream-ordered path
#      (cudaMallocAsync on one stream) natively and with GMEM_TRACE=0;
#   3. torch_alloc_cost.py: the same in a Python process with torch loaded (deep stacks);
#   4. the fast-step convnet, the GPT and ResNet-50 under no caching + gmem, trace off (mode c)
#      and default options (c-trace-stacks), REPS times each, interleaved.
# Usage: bench/trace_cost_gpu.sh OUTDIR   (BUILD: the bundle, default .device/build; REPS 3;
#        ONLY=trace_cost: only parts 1 and 2, the per-operation targets; REPS=6 for them)
set -u
cd "$(dirname "$0")/.."
OUT=${1:?usage: trace_cost_gpu.sh OUTDIR}
BUILD=$(realpath "${BUILD:-.device/build}")
REPS=${REPS:-3}
mkdir -p "$OUT"
lib=$BUILD/lib/libgmem.so
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

echo "== trace_bench"
LD_LIBRARY_PATH="$BUILD/lib" "$BUILD/bench/trace_bench" --runs 3 | tee "$OUT/trace_bench.txt"

with_gmem() { # label env... -- cmd...
  local label=$1; shift
  env LD_PRELOAD="$lib" GMEM_TRACE_KEEP=none "$@"
}
echo "== trace_cost (C++, cudaMalloc pairs; the driver route, the stream-ordered path and the clock pair alone beside them)"
# Each rep runs every row once, in reverse order every other rep (paired rounds); the
# trace-off rows are split (the pairs that fenced apart: their p99 is the fences' tail).
trace_cost_row() { # N: the Nth row
  local t=("$BUILD/bench/trace_cost" 200000)
  case $1 in
  1) "${t[@]}" timer timer ;;
  2) "${t[@]}" native ;;
  3) with_gmem x GMEM_TRACE=0 "${t[@]}" gmem-trace-off runtime split ;;
  4) with_gmem x GMEM_TRACE=0 "${t[@]}" gmem-trace-off-driver driver split ;;
  5) "${t[@]}" native-async async ;;
  6) with_gmem x GMEM_TRACE=0 "${t[@]}" gmem-trace-off-async async ;;
  7) with_gmem x GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0 "${t[@]}" gmem-stacks-off ;;
  8) with_gmem x "${t[@]}" gmem-default ;;
  esac
}
for rep in $(seq "$REPS"); do
  rows="1 2 3 4 5 6 7 8"
  [ $((rep % 2)) = 0 ] && rows="8 7 6 5 4 3 2 1"
  for n in $rows; do trace_cost_row "$n"; done | sed "s/^{/{\"rep\":$rep,/"
done | tee "$OUT/trace_cost.jsonl"
python3 bench/trace_cost_summary.py "$OUT/trace_cost.jsonl" "$OUT/trace_bench.txt" |
  tee "$OUT/trace_cost_summary.txt"

[ "${ONLY:-}" = trace_cost ] && exit 0

echo "== torch_alloc_cost (Python + torch, no caching)"
for rep in $(seq "$REPS"); do
  python3 bench/workloads/torch_alloc_cost.py --label torch-caching
  with_gmem x PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 \
    python3 bench/workloads/torch_alloc_cost.py --label gmem-trace-off
  with_gmem x PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_STACK_DEPTH=0 \
    python3 bench/workloads/torch_alloc_cost.py --label gmem-stacks-off
  with_gmem x PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    python3 bench/workloads/torch_alloc_cost.py --label gmem-default
done | tee "$OUT/torch_alloc_cost.jsonl"

echo "== workloads"
python3 bench/run_workloads.py --out "$OUT/workloads" --gmem-lib "$lib" --reps "$REPS" \
  --timeout 200 \
  --only 'torch-smallconv/a$,torch-smallconv/c$,torch-smallconv/c-trace-stacks$,torch-gpt/c$,torch-gpt/c-trace-stacks$,torch-convnet/c$,torch-convnet/c-trace-stacks$' \
  --reps-only 'torch-smallconv/c,torch-gpt/c,torch-convnet/c'
python3 - "$OUT/workloads/workloads.jsonl" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("steps_per_s"):
        runs[(r["workload"], r["mode"])].append(r["steps_per_s"])
for (w, m), v in sorted(runs.items()):
    print(f"{w:18s} {m:16s} steps/s mean {statistics.mean(v):7.2f}  runs {['%.2f' % x for x in v]}")
for w in sorted({w for w, _ in runs}):
    off, on = runs.get((w, "c")), runs.get((w, "c-trace-stacks"))
    if off and on:
        print(f"{w:18s} tracing on / off: {statistics.mean(on) / statistics.mean(off):.3f}")
PY
ls /dev/shm | grep -c '^gmem\.' | sed 's/^/trace objects left in \/dev\/shm: /'
