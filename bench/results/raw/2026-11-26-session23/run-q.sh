#!/usr/bin/env bash
# Session 23, GPU call Q: per-thread caches of stream-ordered blocks. stream_alloc_bench with
# gmem's DEFAULT options (trace and stacks on), base (main at d97b36d) against new, beside the
# launch floor and cudaMallocAsync, 1/4/16 threads, two rounds; a GMEM_VERBOSE run of each at
# 16 threads (pool lock contention); hook_bench on the fake driver, base and new, trace off.
set -u
B=$PWD/.device/build
X=$B/tests/gpu/stream_alloc_bench
declare -A LIB=([base]=$PWD/.device/base/libgmem.so [new]=$B/lib/libgmem.so)
J=$OUT/stream-q.jsonl
: > $J
{
common=(--threads 1,4,16 --seconds 0.5 --random-sizes 256,4M --live 8 --json $J)
for r in 1 2; do
  $X --method floor --label floor "${common[@]}" >/dev/null
  $X --method cudaMallocAsync --label cudaMallocAsync "${common[@]}" >/dev/null
  for v in base new; do
    for m in cudaMallocAsync cudaMalloc; do
      env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none $X --method $m --label gmem-$m-defaults-$v "${common[@]}" >/dev/null 2>&1 || echo "gmem-$m-$v round $r rc=$?"
    done
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
    print(f"\n{t} threads: label  mean us/op (runs)  p99 us (runs)  above floor  share of cudaMallocAsync's")
    for label, rs in cells.items():
        m = sum(x["mean_ns"] for x in rs) / len(rs)
        print(f"  {label:<32} {m/1000:>7.1f} ({', '.join(f'{x['mean_ns']/1000:.1f}' for x in rs)})  p99 ({', '.join(f'{x['p99_ns']/1000:.1f}' for x in rs)})  above {(m - floor)/1000:>6.1f}  {((m - floor) / (asyn - floor)):.2f}x")
PY
for v in base new; do
  echo "== verbose $v stream-ordered 16 threads"
  env LD_PRELOAD=${LIB[$v]} GMEM_VERBOSE=1 GMEM_TRACE_KEEP=none $X --method cudaMallocAsync --threads 16 --seconds 1 --random-sizes 256,4M --live 8 2>&1 | grep -E "mean|pool_lock|kind=device"
done
for v in base new; do
  for t in 1 4 16; do
    echo "== fake $v async $t threads, trace off"
    LD_LIBRARY_PATH=$B/tests/fake_cuda GMEM_VERBOSE=1 GMEM_TRACE=0 LD_PRELOAD=${LIB[$v]} $B/bench/hook_bench --api async --tests random --random-sizes 256,4M --live 8 --threads $t --seconds 0.5 2>&1 | grep -E "async  |pool_lock"
  done
done
} > $OUT/q.log 2>&1
