#!/usr/bin/env bash
# Session 21, GPU call F (final build): the GPU Python-frame and PyTorch tests, the fake-driver
# Python test under this machine's CPython, then base (main 2a32793) against new on
# torch.empty pairs (6 interleaved rounds, one core), trace_bench and the Python-frame cost.
set -u
B=$PWD/.device/build
declare -A LIB=([base]=$PWD/.device/base/libgmem.so [new]=$B/lib/libgmem.so)
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in python_frames_test pytorch_test; do
  GMEM_BUILD=$B timeout 150 bash tests/gpu/$t.sh > $OUT/$t.log 2>&1; echo "gpu $t rc=$?"
done
GMEM_BUILD=$B timeout 120 bash tests/python/python_frames_test.sh > $OUT/fake_python312.log 2>&1
echo "fake python_frames_test (python $(python3 -c 'import sys; print(sys.version.split()[0])')) rc=$?"
echo "== torch_alloc_cost pinned (taskset -c 3), 6 rounds"
for r in 1 2 3 4 5 6; do
  for v in base new; do
    for cfg in "GMEM_TRACE=0" "GMEM_TRACE=1"; do
      env LD_PRELOAD=${LIB[$v]} GMEM_TRACE_KEEP=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg taskset -c 3 python3 bench/workloads/torch_alloc_cost.py --label "$v $cfg" 2>&1 | tail -1
    done
  done
done
echo "== python_frames_bench --torch --released (ctypes pairs, Python depth 20), new, 3 rounds"
for r in 1 2 3; do
  for cfg in "GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0" "GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=16" "GMEM_STACK_DEPTH=16 GMEM_PYTHON_DEPTH=0"; do
    echo -n "$cfg: "; env LD_PRELOAD=${LIB[new]} GMEM_TRACE_KEEP=none $cfg taskset -c 3 python3 bench/python_frames_bench.py --torch --released 50000 20 2>&1 | tail -1
  done
done
echo "== trace_bench new"
LD_LIBRARY_PATH=$B/lib taskset -c 3 $B/bench/trace_bench --runs 3 | tail -6
echo "total $((SECONDS - start)) s"
} > $OUT/f.log 2>&1
