#!/bin/bash
# Session 25, call 4 (H200): the three workloads, trace off against defaults, 4 interleaved
# rounds; trace_cost by route; perf sample counts of libgmem in torch.empty pairs (final build).
set -u
W=$PWD/.device/w; P=$PWD/.device/perf
export PYTHONUNBUFFERED=1
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/a4-gpu.txt
{
for r in 1 2 3 4; do
  for m in "smallconv 1000" "gpt 40" "convnet 30"; do
    set -- $m
    for cfg in GMEM_TRACE=0 GMEM_TRACE=1; do
      sps=$(env LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
        taskset -c 2-9 python3 bench/workloads/torch_train.py --model $1 --steps $2 2>&1 | grep -o '"steps_per_s": [0-9.]*' | head -1)
      echo "round $r $1 $cfg: $sps   (t=$((SECONDS - start)))"
    done
  done
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/a4-workloads.log 2>&1
{
for r in 1 2; do
  $W/bench/trace_cost 200000 "timer" timer
  $W/bench/trace_cost 20000 "native runtime" runtime
  for route in driver runtime; do
    for cfg in GMEM_TRACE=0 GMEM_TRACE=1; do
      env LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none $cfg taskset -c 3 \
        $W/bench/trace_cost 200000 "gmem $route $cfg" $route
    done
  done
done
env LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none GMEM_TRACE=0 GMEM_VERBOSE=1 taskset -c 3 \
  $W/bench/trace_cost 200000 "gmem driver verbose" driver 2>&1 | grep -E "kind|pool device|barriers|host_time"
echo "elapsed $((SECONDS - start)) s"
} > $OUT/a4-trace_cost.jsonl 2>&1
{
for r in 1 2; do
  env LD_LIBRARY_PATH=$P/lib $P/perf record -q -o $OUT/t.data -F 10000 -- env -u LD_LIBRARY_PATH \
    LD_PRELOAD=$W/lib/libgmem.so GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --pairs 200000 --label "perf r$r" 2>&1 | grep kind
  echo "-- round $r libgmem samples"
  LD_LIBRARY_PATH=$P/lib $P/perf report -i $OUT/t.data -n --no-children --stdio --dsos libgmem.so --sort sym 2>/dev/null | grep "%" | head -40
  rm -f $OUT/t.data
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/a4-perf.log 2>&1
