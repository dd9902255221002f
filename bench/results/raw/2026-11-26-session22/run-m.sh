#!/usr/bin/env bash
# Session 22, GPU call M (after L): allocation with kernels in flight (stream_alloc_bench: 256 B - 4 MiB,
# 8 live, 1/4/16 threads, each on its own non-blocking stream), base (main at 361973b) against
# new (fence first; shared fences; the CUDA 10.0 capture begin hooked, so captures stay tracked), trace off, two rounds; GMEM_VERBOSE=1 counters of the new
# build's cudaMalloc runs.
set -u
B=$PWD/.device/build
X=$B/tests/gpu/stream_alloc_bench
declare -A LIB=([base]=$PWD/.device/base/libgmem.so [new]=$B/lib/libgmem.so)
J=$OUT/stream.jsonl
: > $J
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
common=(--threads 1,4,16 --seconds 0.5 --random-sizes 256,4M --live 8 --json $J)
for r in 1 2; do
  $X --method floor --label floor "${common[@]}" | tail -3
  $X --method cudaMallocAsync --label cudaMallocAsync "${common[@]}" | tail -3
  for v in base new; do
    env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 $X --method cudaMallocAsync --label gmem-async-$v "${common[@]}" | tail -3
    env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 GMEM_VERBOSE=1 $X --method cudaMalloc --label gmem-sync-$v "${common[@]}" 2>&1 \
      | grep -E "mismatch|ops|^gmem: (pool device=0 kind=device|barriers)" | cut -c1-400 | tail -8
  done
done
python3 - $J <<'PY'
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows:
    by[r["threads"]][r["label"]].append(r)
for t in sorted(by):
    cells = by[t]
    floor = sum(x["mean_ns"] for x in cells["floor"]) / len(cells["floor"])
    asyn = sum(x["mean_ns"] for x in cells["cudaMallocAsync"]) / len(cells["cudaMallocAsync"])
    print(f"\n{t} threads: label  mean ns/op (runs)  p99  above floor  share of cudaMallocAsync's")
    for label, rs in cells.items():
        m = sum(x["mean_ns"] for x in rs) / len(rs)
        print(f"  {label:<18} {m:>9.0f} ({', '.join(str(round(x['mean_ns'])) for x in rs)}) p99 {', '.join(str(round(x['p99_ns'])) for x in rs)}  above {m - floor:>8.0f}  {((m - floor) / (asyn - floor)) if asyn > floor else float('nan'):.2f}x  mismatches {[x.get('mismatches') for x in rs]}")
PY
for r in 1 2; do
  out=$(env LD_PRELOAD=$B/lib/libgmem.so GMEM_TRACE=0 GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    taskset -c 2-5 python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1)
  echo "convnet round $r: $(echo "$out" | grep -o '"steps_per_s": [0-9.]*' | head -1)"
  echo "$out" | grep -E "^gmem: (pool device=0 kind=device|host_time|barriers|captures)" | grep -oE "(peak_reserved_bytes|fences|fence_ns|made|busy|ns|open|tracked)=[0-9]+" | tr '\n' ' '; echo
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/m.log 2>&1
