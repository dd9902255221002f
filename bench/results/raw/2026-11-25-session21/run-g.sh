#!/usr/bin/env bash
# Session 21, GPU call G: allocation traces of the fast-step convnet and the GPT loop (PyTorch's
# memory history, for bench/replay), and gmem's own pool counters on the convnet.
set -u
B=$PWD/.device/build
export PYTHONUNBUFFERED=1
{
python3 bench/workloads/torch_train.py --model smallconv --steps 300 --record-trace $OUT/trace-smallconv.txt 2>&1 | tail -2
python3 bench/workloads/torch_train.py --model gpt --steps 40 --record-trace $OUT/trace-gpt.txt 2>&1 | tail -2
env LD_PRELOAD=$B/lib/libgmem.so GMEM_TRACE=0 GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1 | grep -E "^gmem:|steps_per_s" | cut -c1-600
} > $OUT/g.log 2>&1
gzip -f $OUT/trace-*.txt
