#!/usr/bin/env bash
# Session 21, GPU call D: (1) torch.empty pair cost, base (main 2a32793) against new, pinned to
# one core, 4 interleaved rounds; (2) the workloads for issues 12 and 13, 2 interleaved reps.
set -u
B=$PWD/.device/build
declare -A LIB=([base]=$PWD/.device/base/libgmem.so [new]=$B/lib/libgmem.so)
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== torch_alloc_cost pinned (taskset -c 3), 4 rounds"
for r in 1 2 3 4; do
  for v in base new; do
    for cfg in "GMEM_TRACE=0" "GMEM_TRACE=1"; do
      env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --label "$v $cfg" 2>&1 | tail -1
    done
  done
done
echo "torch part $((SECONDS - start)) s"
} > $OUT/d.log 2>&1
timeout $((560 - SECONDS)) python3 bench/run_workloads.py --out $OUT/w --gmem-lib ${LIB[new]} --reps 2 --timeout 100 \
  --only 'torch-smallconv/a$,torch-smallconv/a-expandable$,torch-smallconv/c$,torch-smallconv/c-trace-stacks$,torch-gpt/a$,torch-gpt/a-expandable$,torch-gpt/c$,torch-gpt/c-trace-stacks$,torch-convnet/c$,torch-convnet/c-trace-stacks$,cupy/pool$,cupy/nopool+gmem$' \
  --reps-only 'torch-smallconv,torch-gpt,torch-convnet,cupy' > $OUT/workloads.log 2>&1
echo "workloads rc=$? total $((SECONDS - start)) s" >> $OUT/d.log
cp $OUT/w/workloads.jsonl $OUT/workloads.jsonl 2>/dev/null; rm -rf $OUT/w
