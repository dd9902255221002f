#!/usr/bin/env bash
# GPU call: the GPT loop (no caching + gmem, trace off vs defaults, 4 each) and PyTorch's own
# caching allocator on the GPT loop and the fast-step convnet (mode a, 3 each), interleaved.
set -u
export PYTHONUNBUFFERED=1
lib=$PWD/.device/build/lib/libgmem.so
timeout 560 python3 bench/run_workloads.py --out $OUT/w --gmem-lib $lib --reps 4 --timeout 100 \
  --only 'torch-gpt/a$,torch-gpt/c$,torch-gpt/c-trace-stacks$,torch-smallconv/a$,torch-smallconv/c$' \
  --reps-only 'torch-gpt/c,torch-gpt/a,torch-smallconv/a,torch-smallconv/c' > $OUT/workloads5.log 2>&1
echo "workloads rc=$?"
cp $OUT/w/workloads.jsonl $OUT/workloads5.jsonl 2>/dev/null; rm -rf $OUT/w
