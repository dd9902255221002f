#!/usr/bin/env bash
# Alloc+free pair cost, plain and under libgmem.so (not a test: prints a table).
source "$(dirname "$0")/lib.sh"
build_cu alloc_bench alloc_bench.cu
"$bin/alloc_bench" "$@" | sed 's/^bench /plain /'
with_shim "$bin/alloc_bench" "$@" 2>&1 | sed 's/^bench /gmem  /' 
