#!/usr/bin/env bash
# GPU call: more repetitions for the tracing issue's point 2 (torch pairs, fast-step convnet,
# ResNet-50: no caching + gmem, GMEM_TRACE=0 vs defaults, interleaved), 4 each.
set -u
export PYTHONUNBUFFERED=1
B=$PWD/.device/build; lib=$B/lib/libgmem.so
start=$SECONDS
for rep in 1 2 3 4; do
  env LD_PRELOAD=$lib GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_TRACE=0 \
    timeout 40 python3 bench/workloads/torch_alloc_cost.py --label gmem-trace-off
  env LD_PRELOAD=$lib GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0 \
    timeout 40 python3 bench/workloads/torch_alloc_cost.py --label gmem-no-stacks
  env LD_PRELOAD=$lib GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    timeout 40 python3 bench/workloads/torch_alloc_cost.py --label gmem-default
done > $OUT/torch_alloc_cost4.jsonl 2>&1
echo "torch pairs done $((SECONDS - start)) s"
timeout 420 python3 bench/run_workloads.py --out $OUT/w --gmem-lib $lib --reps 4 --timeout 100 \
  --only 'torch-smallconv/c$,torch-smallconv/c-trace-stacks$,torch-convnet/c$,torch-convnet/c-trace-stacks$' \
  --reps-only 'torch-smallconv/c,torch-convnet/c' > $OUT/workloads4.log 2>&1
echo "workloads rc=$? $((SECONDS - start)) s"
cp $OUT/w/workloads.jsonl $OUT/workloads4.jsonl 2>/dev/null; rm -rf $OUT/w
