#!/usr/bin/env bash
# Alloc+free pair cost, plain and under libgmem.so (not a test: prints a table).
source "$(dirname "$0")/lib.sh"
build_cu pair_cost pair_cost.cu
"$bin/pair_cost" "$@" | sed 's/^bench /plain /'
with_shim "$bin/pair_cost" "$@" 2>&1 | sed 's/^bench /gmem  /' 
