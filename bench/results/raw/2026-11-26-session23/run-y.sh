#!/bin/bash
cd "$(dirname "$0")/x"
export LD_LIBRARY_PATH=$PWD/fake
for round in 1 2; do
for cfg in "GMEM_TRACE=0" "GMEM_STACK_DEPTH=0" "GMEM_X=1"; do
  for api in async sync; do
    echo "== round $round $cfg $api"
    env $cfg GMEM_TRACE_KEEP=none LD_PRELOAD=$PWD/lib/libgmem.so ./hook_bench --api $api --tests random --random-sizes 256,4M --live 8 --threads 1,4,16 --seconds 0.5 2>&1 | grep -v "^{\|floor"
  done
done
done > $OUT/y.log 2>&1
