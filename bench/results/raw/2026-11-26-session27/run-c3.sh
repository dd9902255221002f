#!/bin/bash
# Session 27, call 3 (asked for an H200): (1) trace_bench base/new, 1 thread (4 rounds) and
# 4/8 threads (2 rounds), as call 2; (2) the fast-step convnet under no caching + gmem, new
# and base, trace off then defaults, 2 interleaved rounds; (3) make test-gpu and PyTorch's
# _memory_viz on gmem's export with the new build (.device/build from scripts/gpu-bundle.sh at
# 6d8b9c9). Carried: .device/s27, .device/build.
set -u
N=$PWD/.device/s27
declare -A LIB=([base]=$N/base/lib/libgmem.so [new]=$N/new/lib/libgmem.so)
declare -A TB=([base]=$N/base/trace_bench [new]=$N/new/trace_bench)
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/c3-device.log
lscpu | grep -E "Model name|^CPU\(s\)" >> $OUT/c3-device.log
{
for r in 1 2 3 4; do for v in base new; do for row in off nostacks; do
  echo "== $v round $r threads 1 $row: $(taskset -c 3 ${TB[$v]} --runs 3 --only $row 2>&1 | tail -1)"
done; done; done
for t in 4 8; do for r in 1 2; do for v in base new; do for row in off nostacks; do
  echo "== $v round $r threads $t $row: $(taskset -c 2-9 ${TB[$v]} --runs 3 --threads $t --first-lap 100000 --only $row 2>&1 | tail -1)"
done; done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c3-trace_bench.log 2>&1
export PYTHONUNBUFFERED=1
{
for r in 1 2; do for v in base new; do for cfg in GMEM_TRACE=0 GMEM_TRACE=1; do
  out=$(env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
    taskset -c 2-5 python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1)
  echo "round $r $v $cfg: $(echo "$out" | grep -o '"steps_per_s": [0-9.]*' | head -1)"
done; done; done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/c3-convnet.log 2>&1
OUT=$OUT/session bash scripts/gpu-session.sh tests > $OUT/c3-test-gpu-session.log 2>&1
cp $OUT/session/test-gpu.log $OUT/test-gpu.log 2>/dev/null
rm -rf $OUT/session
echo "elapsed $((SECONDS - start)) s" >> $OUT/c3-test-gpu-session.log
ls /dev/shm > $OUT/c3-shm-after.log
