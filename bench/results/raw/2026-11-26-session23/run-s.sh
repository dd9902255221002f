#!/usr/bin/env bash
# Session 23, GPU call S: the committed build 79ff33d (caches of 16 blocks, 16 MiB), make test-gpu,
# then stream_alloc_bench, base (main at d97b36d) against new, 3 interleaved rounds
# at 1/4/16 threads, defaults (trace and stacks on) and, stream-ordered, GMEM_TRACE=0; then
# pool_bench BM_pair_threads (the pool alone, 64 KiB pairs on each thread's stream) and
# hook_bench on the fake driver, base and new.
set -u
B=$PWD/.device/build
X=$B/tests/gpu/stream_alloc_bench
declare -A LIB=([base]=$PWD/.device/base/libgmem.so [new]=$B/lib/libgmem.so)
J=$OUT/stream-s.jsonl
: > $J
OUT=$OUT bash scripts/gpu-session.sh tests > $OUT/test-gpu-session-s.log 2>&1
echo "gpu-session rc=$?" > $OUT/s-tests.log
grep -E '^(ok|FAIL|tests:)' $OUT/test-gpu.log >> $OUT/s-tests.log
{
common=(--threads 1,4,16 --seconds 0.5 --random-sizes 256,4M --live 8 --json $J)
for r in 1 2 3; do
  $X --method floor --label floor "${common[@]}" >/dev/null
  $X --method cudaMallocAsync --label cudaMallocAsync "${common[@]}" >/dev/null
  for v in base new; do
    for m in cudaMallocAsync cudaMalloc; do
      env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none $X --method $m --label gmem-$m-defaults-$v "${common[@]}" >/dev/null 2>&1 || echo "gmem-$m-$v round $r rc=$?"
    done
    env LD_PRELOAD=${LIB[$v]} GMEM_TRACE=0 $X --method cudaMallocAsync --label gmem-cudaMallocAsync-traceoff-$v "${common[@]}" >/dev/null 2>&1 || echo "traceoff-$v round $r rc=$?"
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
        print(f"  {label:<36} {m/1000:>7.1f} ({', '.join(f'{x['mean_ns']/1000:.1f}' for x in rs)})  p99 ({', '.join(f'{x['p99_ns']/1000:.1f}' for x in rs)})  above {(m - floor)/1000:>6.1f}  {((m - floor) / (asyn - floor)):.2f}x")
PY
for v in base new; do
  echo "== verbose $v stream-ordered 16 threads"
  env LD_PRELOAD=${LIB[$v]} GMEM_VERBOSE=1 GMEM_TRACE_KEEP=none $X --method cudaMallocAsync --threads 16 --seconds 1 --random-sizes 256,4M --live 8 2>&1 | grep -E "mean|pool_lock|kind=device"
done
for v in base new; do
  echo "== pool_bench $v"
  LD_LIBRARY_PATH=$B/bench $PWD/.device/pool_bench-$v --benchmark_filter=BM_pair_threads --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 2>&1 | grep -E "median|mean"
done
for v in base new; do
  for t in 1 4 16; do
    echo "== fake $v async $t threads, trace off"
    LD_LIBRARY_PATH=$B/tests/fake_cuda GMEM_VERBOSE=1 GMEM_TRACE=0 LD_PRELOAD=${LIB[$v]} $B/bench/hook_bench --api async --tests random --random-sizes 256,4M --live 8 --threads $t --seconds 0.5 2>&1 | grep -E "async  |pool_lock"
  done
done
} > $OUT/s.log 2>&1
