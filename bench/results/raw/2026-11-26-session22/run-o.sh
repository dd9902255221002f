#!/usr/bin/env bash
# Session 22, GPU call O: the final build. make test-gpu (scripts/gpu-session.sh tests), then
# stream_alloc_bench with gmem's DEFAULT options (trace and stacks on) against the base build
# (main at 361973b), the launch floor and cudaMallocAsync, 1/4/16 threads, two rounds, mean and
# p99 per op.
set -u
B=$PWD/.device/build
X=$B/tests/gpu/stream_alloc_bench
declare -A LIB=([base]=$PWD/.device/base/libgmem.so [new]=$B/lib/libgmem.so)
J=$OUT/stream-o.jsonl
: > $J
OUT=$OUT bash scripts/gpu-session.sh tests > $OUT/test-gpu-session-o.log 2>&1
echo "gpu-session rc=$?" > $OUT/o.log
grep -E '^(ok|FAIL|tests:)' $OUT/test-gpu.log >> $OUT/o.log
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
} >> $OUT/o.log 2>&1
