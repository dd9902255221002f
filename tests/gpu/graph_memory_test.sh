#!/usr/bin/env bash
# Graph memory: the program's self-checks pass with and without gmem; under gmem
# its graph allocations are traced as kind "graph" (memory nodes and the captured
# cudaMallocAsync), counted at exit, and every one is freed by the end (gmem leaks: none).
source "$(dirname "$0")/lib.sh"
build_cu graph_memory graph_memory.cu
gmem=$build/bin/gmem
fail=0
"$bin/graph_memory" || { echo "FAIL: graph_memory without gmem"; fail=1; }
trace=$bin/graph_memory.gmem
rm -f "$trace"
GMEM_TRACE=1 GMEM_TRACE_KEEP=none GMEM_TRACE_SAVE=$trace with_shim "$bin/graph_memory" \
  >"$bin/graph_memory.log" 2>&1
rc=$?
grep -E '^(graph_memory|FAIL|gmem: passthrough)' "$bin/graph_memory.log"
[ $rc -eq 0 ] || { echo "FAIL: graph_memory under gmem (exit $rc)"; fail=1; }
n=$(sed -n 's/^gmem: passthrough .* graph=\([0-9]*\) .*/\1/p' "$bin/graph_memory.log")
[ "${n:-0}" -ge 3 ] || { echo "FAIL: expected >= 3 graph allocations traced, saw '${n:-none}'"; fail=1; }
"$gmem" leaks "$trace"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: allocations outstanding at exit, or no readable trace (gmem leaks exit $rc)"; fail=1; }
"$gmem" export "$trace" --format chrome -o "$bin/graph_memory.json" --force ||
  { echo "FAIL: chrome export"; fail=1; }
exit $fail
